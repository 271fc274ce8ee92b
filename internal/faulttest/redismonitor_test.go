package faulttest

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Where the control plane's Redis commands go: a MONITOR over a short
// window, each command classed by the family of its first key (ids, dates
// and hash tags folded), so that a command count per job splits into
// asynq's queue, results, runs, the job index and the rest. MONITOR slows
// Redis, so the window is not one the throughput is measured over.

// monitorRedis records every command Redis runs until ctx ends and
// returns the lines, unparsed. Commands a Lua script runs come with
// "[0 lua]" in their line.
func monitorRedis(ctx context.Context, t *testing.T, opt *redis.Options) []string {
	var d net.Dialer
	conn, err := d.DialContext(ctx, opt.Network, opt.Addr)
	require.NoError(t, err, "MONITOR: dial Redis")
	defer conn.Close()
	rd := bufio.NewReader(conn)
	if opt.Password != "" {
		user := cmp.Or(opt.Username, "default")
		_, err = fmt.Fprintf(conn, "*3\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(user), user, len(opt.Password), opt.Password)
		require.NoError(t, err)
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(line, "+OK"), "MONITOR: AUTH: %s", line)
	}
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	var lines []string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return lines // the deadline at ctx's end
		}
		if line = strings.TrimRight(line, "\r\n"); strings.HasPrefix(line, "+") && line != "+OK" {
			lines = append(lines, line[1:])
		}
	}
}

// monitorArgs splits a MONITOR line, `1700000000.1 [0 unix:/s] "set" "k" "v"`,
// into whether a script ran it and its arguments, unescaped enough to
// class keys (\" and \\ only).
func monitorArgs(line string) (lua bool, args []string) {
	head, rest, ok := strings.Cut(line, "] ")
	if !ok {
		return false, nil
	}
	lua = strings.HasSuffix(head, " lua")
	var cur strings.Builder
	in, esc := false, false
	for _, c := range rest {
		switch {
		case !in && c == '"':
			in = true
			cur.Reset()
		case in && esc:
			cur.WriteRune(c)
			esc = false
		case in && c == '\\':
			esc = true
		case in && c == '"':
			in = false
			args = append(args, cur.String())
		case in:
			cur.WriteRune(c)
		}
	}
	return lua, args
}

// commandKey is a command's first key: after numkeys for EVAL and
// EVALSHA, none for commands that take none.
func commandKey(args []string) string {
	if len(args) < 2 {
		return ""
	}
	switch strings.ToLower(args[0]) {
	case "eval", "evalsha", "evalsha_ro", "eval_ro", "fcall":
		if len(args) > 3 && args[2] != "0" {
			return args[3]
		}
		return ""
	case "ping", "info", "client", "multi", "exec", "select", "hello", "auth", "script", "config", "time", "dbsize", "publish", "command":
		return ""
	}
	return args[1]
}

// keyFamily folds a key into its family: hash tags to {q}, and the key cut
// at its first segment that looks like an id, a date or a number (a job id,
// a worker id, a day), so that asynq:{default}:t:cutd… and
// paddock:runs:default/… read asynq:{q}:t:* and paddock:runs:*.
func keyFamily(key string) string {
	if key == "" {
		return "(no key)"
	}
	segs := strings.Split(key, ":")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			segs[i] = "{q}"
		case idLike(s):
			return strings.Join(append(segs[:i:i], "*"), ":")
		}
	}
	return strings.Join(segs, ":")
}

// idLike: a segment with a digit or a slash in it (ids, dates, tenant/job
// keys), or a long one.
func idLike(s string) bool {
	return len(s) >= 16 || strings.ContainsAny(s, "0123456789/.")
}

// redisFamilies counts lines by key family and command, per job.
func redisFamilies(lines []string, jobs int64) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, l := range lines {
		lua, args := monitorArgs(l)
		if len(args) == 0 {
			continue
		}
		cmd := strings.ToLower(args[0])
		if lua {
			cmd += " (in a script)"
		}
		fam := keyFamily(commandKey(args))
		if out[fam] == nil {
			out[fam] = map[string]float64{}
		}
		out[fam][cmd] += 1 / float64(max(jobs, 1))
	}
	for _, m := range out {
		for k, v := range m {
			m[k] = round1(v)
		}
	}
	return out
}

// familyTable is the families, most commands first, one line each.
func familyTable(fams map[string]map[string]float64) string {
	type row struct {
		fam   string
		total float64
		cmds  string
	}
	var rows []row
	for fam, m := range fams {
		r := row{fam: fam}
		var cs []string
		for c, n := range m {
			r.total += n
			cs = append(cs, fmt.Sprintf("%s %.1f", c, n))
		}
		slices.Sort(cs)
		r.cmds = strings.Join(cs, ", ")
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.fam, b.fam))
	})
	var b strings.Builder
	b.WriteString("Redis commands per job by key family (MONITOR window):\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "  %6.1f  %-40s %s\n", r.total, r.fam, r.cmds)
	}
	return b.String()
}

func TestMonitorLinesClassByKeyFamily(t *testing.T) {
	lines := []string{
		`1765100000.000001 [0 unix:/tmp/r.sock] "evalsha" "abc" "2" "asynq:{default}:t:cutdneep04702dg885" "asynq:{default}:active" "x"`,
		`1765100000.000002 [0 lua] "hset" "asynq:{default}:t:cutdneep04702dg885" "state" "active"`,
		`1765100000.000003 [0 unix:/tmp/r.sock] "set" "paddock:runs:default/abc1" "1"`,
		`1765100000.000004 [0 unix:/tmp/r.sock] "set" "paddock:runs:default/abc2" "say \"hi\""`,
		`1765100000.000005 [0 unix:/tmp/r.sock] "ping"`,
		`1765100000.000006 [0 unix:/tmp/r.sock] "evalsha" "abc" "1" "asynq:{low}:active"`,
	}
	fams := redisFamilies(lines, 2)
	require.Equal(t, map[string]map[string]float64{
		"asynq:{q}:t:*":    {"evalsha": 0.5, "hset (in a script)": 0.5},
		"paddock:runs:*":   {"set": 1},
		"(no key)":         {"ping": 0.5},
		"asynq:{q}:active": {"evalsha": 0.5},
	}, fams)
	_, args := monitorArgs(lines[3])
	require.Equal(t, []string{"set", "paddock:runs:default/abc2", `say "hi"`}, args)
}
