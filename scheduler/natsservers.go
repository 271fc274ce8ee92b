package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// NATSServers pings every server of a NATS cluster over a connection of
// the system account (the operator's sys.creds): $SYS.REQ.SERVER.PING.VARZ
// (each server's name, version, connections, routes) and .JSZ (the
// JetStream meta leader). Every server answers; it takes the answers that
// came within Wait.
type NATSServers struct {
	Conn *nats.Conn
	// Wait is how long it collects answers (default 750 ms; the replies of
	// a healthy cluster on one network take a few ms).
	Wait time.Duration
}

// pingReply is a server's answer to a $SYS.REQ.SERVER.PING request.
type pingReply struct {
	Server struct {
		Name      string `json:"name"`
		Cluster   string `json:"cluster"`
		Version   string `json:"ver"`
		JetStream bool   `json:"jetstream"`
	} `json:"server"`
	Data struct {
		Connections int       `json:"connections"`
		Routes      int       `json:"routes"`
		Start       time.Time `json:"start"`
		Meta        *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// Servers implements ServerPinger: the servers that answered, by name,
// and the meta leader.
func (p NATSServers) Servers(ctx context.Context) ([]NATSServer, string, error) {
	if p.Conn == nil {
		return nil, "", errors.New("no system account connection")
	}
	varz, err := p.ping(ctx, "VARZ")
	if err != nil {
		return nil, "", err
	}
	out := make([]NATSServer, 0, len(varz))
	for _, r := range varz {
		s := NATSServer{Name: r.Server.Name, Cluster: r.Server.Cluster, Version: r.Server.Version, JetStream: r.Server.JetStream,
			Connections: r.Data.Connections, Routes: r.Data.Routes}
		if !r.Data.Start.IsZero() {
			s.UptimeS = int64(time.Since(r.Data.Start).Seconds())
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b NATSServer) int { return cmp.Compare(a.Name, b.Name) })
	jsz, err := p.ping(ctx, "JSZ")
	leader := ""
	for _, r := range jsz {
		if r.Data.Meta != nil && r.Data.Meta.Leader != "" {
			leader = r.Data.Meta.Leader
		}
	}
	return out, leader, err
}

// ping sends $SYS.REQ.SERVER.PING.<what> and collects the answers.
func (p NATSServers) ping(ctx context.Context, what string) ([]pingReply, error) {
	inbox := p.Conn.NewRespInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := p.Conn.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := p.Conn.PublishRequest("$SYS.REQ.SERVER.PING."+what, inbox, nil); err != nil {
		return nil, err
	}
	wait := time.NewTimer(cmp.Or(p.Wait, 750*time.Millisecond))
	defer wait.Stop()
	var out []pingReply
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-wait.C:
			if len(out) == 0 {
				return nil, fmt.Errorf("no server answered $SYS.REQ.SERVER.PING.%s: are these the system account's credentials?", what)
			}
			return out, nil
		case m := <-ch:
			var r pingReply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				continue // not a server's answer
			}
			if r.Error != nil {
				return out, fmt.Errorf("$SYS.REQ.SERVER.PING.%s: %s", what, r.Error.Description)
			}
			out = append(out, r)
		}
	}
}
