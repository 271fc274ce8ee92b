package sandbox

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// debianImage has curl, to speak HTTP over a unix socket.
const debianImage = "paddock/sandbox:latest"

// The broker socket: at BrokerTarget in the box, served by whoever takes
// it, for its box only, refused once closed, and absent when off.
func TestBrokerSocket(t *testing.T) {
	t.Parallel()
	testsvc.RequireImage(t, testsvc.Docker(t), debianImage)
	p := Profile{Image: debianImage, MemoryMB: 128, Pids: 64, CPUs: 0.5, TmpfsMB: 16}
	s := newSetup(t, func(c *Config) { c.BrokerSocket = true; c.PoolSize = 1 })
	curl := Command{Script: "curl -sS --max-time 5 --unix-socket " + BrokerTarget + " http://grant/x; echo \" exit=$?\""}

	// Two boxes at once: each one's calls reach its own listener only.
	a, b := s.session(p), s.session(p)
	serve := func(sess *Session, name string) *http.Server {
		ln := sess.Broker()
		require.NotNil(t, ln)
		assert.Nil(t, sess.Broker(), "the listener is handed out once")
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, name) })}
		go func() { _ = srv.Serve(ln) }()
		return srv
	}
	sa, sb := serve(a, "box-a"), serve(b, "box-b")
	assert.Equal(t, "box-a exit=0\n", s.run(a, curl).Stdout.Text())
	assert.Equal(t, "box-b exit=0\n", s.run(b, curl).Stdout.Text())

	// The socket is read-only in the box: it cannot be replaced or removed.
	out := s.run(a, Command{Script: "ls -l " + BrokerTarget + "; rm -f " + BrokerTarget + " 2>&1; ln -sf /tmp/x " + BrokerTarget + " 2>&1; true"})
	assert.Contains(t, out.Stdout.Text(), "srw-rw-rw-")
	assert.Contains(t, out.Stdout.Text(), "Read-only file system")

	// Closed (the job's grants ended): every later call is refused.
	require.NoError(t, sa.Close())
	out = s.run(a, curl)
	assert.Contains(t, out.Stdout.Text(), "exit=7", "connection refused: %s", out.Stderr.Text())
	assert.Equal(t, "box-b exit=0\n", s.run(b, curl).Stdout.Text(), "the other box is unaffected")
	require.NoError(t, sb.Close())

	// A box whose listener nobody takes is refused too, once its session
	// closes it.
	c := s.session(p)
	ln := c.Broker()
	require.NoError(t, ln.Close())
	assert.Contains(t, s.run(c, curl).Stdout.Text(), "exit=7")
}

// Without BrokerSocket nothing is mounted or made.
func TestBrokerSocketOff(t *testing.T) {
	t.Parallel()
	s := newSetup(t, nil)
	sess := s.session(small)
	assert.Nil(t, sess.Broker())
	out := s.run(sess, Command{Script: "ls -a /.paddock /.paddock/ctl; test -e " + BrokerTarget + " && echo present || echo absent"})
	assert.NotContains(t, out.Stdout.Text(), "broker")
	assert.Contains(t, out.Stdout.Text(), "absent")
}
