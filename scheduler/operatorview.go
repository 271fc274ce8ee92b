package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/failwatch"
	"github.com/paddockhq/paddock/job"
)

// OperatorViewConfig configures an OperatorView. A zero field takes its
// default; JetStream, Servers and Sentinels are optional parts of the view.
type OperatorViewConfig struct {
	// KeyPrefix is the workers' Redis key prefix (default "paddock:").
	KeyPrefix string
	// JetStream, of a user that may read every stream's info (the admin or
	// scheduler's): the streams' leaders and replicas.
	JetStream jetstream.JetStream
	// StreamPrefix selects the streams shown (default "PADDOCK_"); at most
	// MaxStreams of them (default 1000).
	StreamPrefix string
	MaxStreams   int
	// Servers, optional, pings the NATS servers (the system account's
	// $SYS.REQ.SERVER.PING: NATSServers); without it the view knows the
	// servers only from the streams' replicas.
	Servers ServerPinger
	// Sentinels, optional: the Sentinels that watch the Redis master
	// MasterName; each is asked which master it names.
	Sentinels  []Sentinel
	MasterName string
}

// Sentinel is one Redis Sentinel: its address and a client of it.
type Sentinel struct {
	Addr   string
	Client *redis.SentinelClient
}

// ServerPinger lists the NATS cluster's servers (NATSServers is one).
type ServerPinger interface {
	Servers(ctx context.Context) ([]NATSServer, string, error)
}

// OperatorView reads the fleet as an operator sees it (`paddock fleet`,
// the gateway's operator fleet page): per host its workers, their
// concurrency, running jobs, warm pool and heartbeat age; the health and
// roles of Redis and of the NATS cluster; the failovers the fleet saw and
// the runs it rescued. It names hosts and worker ids: never show it to a
// tenant (FleetView is the tenant's).
type OperatorView struct {
	rdb redis.UniversalClient
	cfg OperatorViewConfig
}

// NewOperatorView returns an OperatorView over rdb, the fleet's Redis.
func NewOperatorView(rdb redis.UniversalClient, cfg OperatorViewConfig) (*OperatorView, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrConfig)
	}
	cfg.KeyPrefix = cmp.Or(cfg.KeyPrefix, "paddock:")
	cfg.StreamPrefix = cmp.Or(cfg.StreamPrefix, "PADDOCK_")
	cfg.MaxStreams = cmp.Or(cfg.MaxStreams, 1000)
	return &OperatorView{rdb: rdb, cfg: cfg}, nil
}

// OperatorFleet is the operator's view of the fleet (OperatorView.Read).
type OperatorFleet struct {
	At        time.Time        `json:"at"`
	Hosts     []FleetHost      `json:"hosts"`
	Workers   []OperatorWorker `json:"workers"`
	Redis     RedisHealth      `json:"redis"`
	NATS      NATSHealth       `json:"nats"`
	Failovers FleetFailovers   `json:"failovers"`
	// Rescued is the runs of dead workers the fleet's rescuers enqueued
	// again (as the fleet's Redis counts them).
	Rescued int64 `json:"rescued"`
}

// FleetHost sums the workers of one host that beat within the hour.
type FleetHost struct {
	Host         string `json:"host"`
	Workers      int    `json:"workers"`
	WorkersAlive int    `json:"workers_alive"`
	Concurrency  int    `json:"concurrency"`
	Running      int    `json:"running"`
	Pool         int    `json:"pool"`
	// HeartbeatAgeMS is the age of the host's youngest beat.
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
}

// OperatorWorker is one worker that beat within the hour. A dead one
// (its heartbeat key expired) shows the facts of its last beat noted in
// <prefix>workers:last (up to 10 beats before its last).
type OperatorWorker struct {
	job.WorkerBeat
	Alive          bool  `json:"alive"`
	HeartbeatAgeMS int64 `json:"heartbeat_age_ms"`
}

// RedisHealth is the role of the Redis the fleet uses (INFO replication),
// and what the Sentinels say of its master.
type RedisHealth struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Role is master or slave (a fleet whose client reaches a replica
	// cannot write).
	Role              string   `json:"role,omitempty"`
	ConnectedReplicas int      `json:"connected_replicas"`
	Replicas          []string `json:"replicas,omitempty"` // INFO's slaveN lines: ip, port, state, offset, lag
	// MasterLink is a replica's master_link_status (up, down).
	MasterLink string           `json:"master_link,omitempty"`
	ReplID     string           `json:"replid,omitempty"`
	Sentinels  []SentinelHealth `json:"sentinels,omitempty"`
}

// SentinelHealth is one Sentinel's answer: which address it names master.
type SentinelHealth struct {
	Addr   string `json:"addr"`
	Master string `json:"master,omitempty"` // host:port
	Error  string `json:"error,omitempty"`
}

// NATSHealth is the NATS cluster: its servers and the streams' leaders.
type NATSHealth struct {
	OK         bool           `json:"ok"`
	Error      string         `json:"error,omitempty"`
	MetaLeader string         `json:"meta_leader,omitempty"`
	Servers    []NATSServer   `json:"servers"`
	Streams    []StreamHealth `json:"streams"`
	// StreamsPartial says there were more streams than MaxStreams.
	StreamsPartial bool `json:"streams_partial,omitempty"`
}

// NATSServer is one server of the cluster, as it answered a ping.
type NATSServer struct {
	Name        string `json:"name"`
	Cluster     string `json:"cluster,omitempty"`
	Version     string `json:"version,omitempty"`
	Connections int    `json:"connections"`
	Routes      int    `json:"routes"`
	JetStream   bool   `json:"jetstream"`
	UptimeS     int64  `json:"uptime_s,omitempty"`
}

// StreamHealth is one stream's leader and replicas.
type StreamHealth struct {
	Name     string          `json:"name"`
	Leader   string          `json:"leader"`
	Messages uint64          `json:"messages"`
	Replicas []StreamReplica `json:"replicas,omitempty"` // the followers
}

// StreamReplica is one follower of a stream.
type StreamReplica struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	Lag     uint64 `json:"lag"`
	// ActiveMS is how long ago the follower was last heard of.
	ActiveMS int64 `json:"active_ms"`
}

// FleetFailovers are the failovers the fleet saw (internal/failwatch).
type FleetFailovers struct {
	RedisMasterChanges  int       `json:"redis_master_changes"`
	RedisLastChange     time.Time `json:"redis_last_change,omitzero"`
	StreamLeaderChanges int64     `json:"stream_leader_changes"`
	StreamLastChange    time.Time `json:"stream_last_change,omitzero"`
}

// Read returns the fleet now. A part that cannot be read (Redis down, no
// NATS) says so in its Error; only an unreadable worker list is an error.
func (v *OperatorView) Read(ctx context.Context) (OperatorFleet, error) {
	f := OperatorFleet{At: time.Now().UTC(), Hosts: []FleetHost{}, Workers: []OperatorWorker{},
		NATS: NATSHealth{Servers: []NATSServer{}, Streams: []StreamHealth{}}}
	f.Redis = v.redisHealth(ctx)
	f.NATS = v.natsHealth(ctx)
	var err error
	if f.Workers, err = v.workers(ctx, f.At); err != nil {
		return f, err
	}
	f.Hosts = hosts(f.Workers)
	f.Failovers, f.Rescued, err = v.failovers(ctx)
	return f, err
}

// workers are the workers that beat within the hour, youngest beat first.
func (v *OperatorView) workers(ctx context.Context, now time.Time) ([]OperatorWorker, error) {
	zs, err := v.rdb.ZRangeByScoreWithScores(ctx, v.cfg.KeyPrefix+"workers", &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-time.Hour).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	beats := make([]*redis.StringCmd, len(zs))
	lasts := make([]*redis.StringCmd, len(zs))
	_, err = v.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, z := range zs {
			beats[i] = p.Get(ctx, v.cfg.KeyPrefix+"worker:"+fmt.Sprint(z.Member))
			lasts[i] = p.HGet(ctx, v.cfg.KeyPrefix+"workers:last", fmt.Sprint(z.Member))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("workers: %w", err)
	}
	out := make([]OperatorWorker, 0, len(zs))
	for i, z := range zs {
		id := fmt.Sprint(z.Member)
		w := OperatorWorker{WorkerBeat: job.WorkerBeat{ID: id}, HeartbeatAgeMS: max(0, now.UnixMilli()-int64(z.Score))}
		val, err := beats[i].Result()
		w.Alive = err == nil
		if !w.Alive {
			val, err = lasts[i].Result() // its last facts, up to 10 beats old
		}
		if b, perr := job.ParseWorkerBeat(id, val); err == nil && perr == nil {
			w.WorkerBeat = b
			if w.Alive || b.BeatAt.After(time.UnixMilli(int64(z.Score))) {
				w.HeartbeatAgeMS = max(0, now.Sub(b.BeatAt).Milliseconds())
			}
		}
		out = append(out, w)
	}
	slices.SortStableFunc(out, func(a, b OperatorWorker) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// hosts sums the workers by host (a worker of unknown host: its id).
func hosts(ws []OperatorWorker) []FleetHost {
	by := map[string]*FleetHost{}
	for _, w := range ws {
		name := cmp.Or(w.Host, w.ID)
		h := by[name]
		if h == nil {
			h = &FleetHost{Host: name, HeartbeatAgeMS: w.HeartbeatAgeMS}
			by[name] = h
		}
		h.Workers++
		h.HeartbeatAgeMS = min(h.HeartbeatAgeMS, w.HeartbeatAgeMS)
		if w.Alive {
			h.WorkersAlive++
			h.Concurrency += w.Concurrency
			h.Running += w.Running
			h.Pool += w.Pool
		}
	}
	out := make([]FleetHost, 0, len(by))
	for _, name := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[name])
	}
	return out
}

// redisHealth reads INFO replication, and asks each Sentinel for the
// master.
func (v *OperatorView) redisHealth(ctx context.Context) RedisHealth {
	var h RedisHealth
	info, err := v.rdb.Info(ctx, "replication").Result()
	if err != nil {
		h.Error = err.Error()
	} else {
		h.OK = true
		h.Role = failwatch.InfoField(info, "role")
		h.ConnectedReplicas, _ = strconv.Atoi(failwatch.InfoField(info, "connected_slaves"))
		for i := range h.ConnectedReplicas {
			h.Replicas = append(h.Replicas, failwatch.InfoField(info, "slave"+strconv.Itoa(i)))
		}
		h.MasterLink = failwatch.InfoField(info, "master_link_status")
		h.ReplID = failwatch.InfoField(info, "master_replid")
	}
	for _, s := range v.cfg.Sentinels {
		sh := SentinelHealth{Addr: s.Addr}
		if addr, err := s.Client.GetMasterAddrByName(ctx, v.cfg.MasterName).Result(); err != nil {
			sh.Error = err.Error()
		} else if len(addr) == 2 {
			sh.Master = addr[0] + ":" + addr[1]
		}
		h.Sentinels = append(h.Sentinels, sh)
	}
	return h
}

// natsHealth pings the servers and lists the streams' leaders.
func (v *OperatorView) natsHealth(ctx context.Context) NATSHealth {
	h := NATSHealth{Servers: []NATSServer{}, Streams: []StreamHealth{}}
	var errs []string
	if v.cfg.Servers != nil {
		servers, leader, err := v.cfg.Servers.Servers(ctx)
		h.Servers, h.MetaLeader = servers, leader
		if err != nil {
			errs = append(errs, "servers: "+err.Error())
		}
	}
	if v.cfg.JetStream != nil {
		if err := v.streams(ctx, &h); err != nil {
			errs = append(errs, "streams: "+err.Error())
		}
	}
	if v.cfg.Servers == nil && v.cfg.JetStream == nil {
		errs = append(errs, "no NATS connection given")
	}
	h.Error = strings.Join(errs, "; ")
	h.OK = h.Error == ""
	return h
}

func (v *OperatorView) streams(ctx context.Context, h *NATSHealth) error {
	l := v.cfg.JetStream.ListStreams(ctx)
	for info := range l.Info() {
		if !strings.HasPrefix(info.Config.Name, v.cfg.StreamPrefix) {
			continue
		}
		if len(h.Streams) == v.cfg.MaxStreams {
			h.StreamsPartial = true
			continue // drain the lister
		}
		sh := StreamHealth{Name: info.Config.Name, Messages: info.State.Msgs}
		if c := info.Cluster; c != nil {
			sh.Leader = c.Leader
			for _, r := range c.Replicas {
				sh.Replicas = append(sh.Replicas, StreamReplica{Name: r.Name, Current: r.Current, Offline: r.Offline,
					Lag: r.Lag, ActiveMS: r.Active.Milliseconds()})
			}
		}
		h.Streams = append(h.Streams, sh)
	}
	slices.SortFunc(h.Streams, func(a, b StreamHealth) int { return cmp.Compare(a.Name, b.Name) })
	return l.Err()
}

// failovers reads what internal/failwatch and the rescuers noted.
func (v *OperatorView) failovers(ctx context.Context) (FleetFailovers, int64, error) {
	var f FleetFailovers
	p := v.cfg.KeyPrefix
	var masters *redis.ZSliceCmd
	var changes *redis.MapStringStringCmd
	var rescued *redis.StringCmd
	_, err := v.rdb.Pipelined(ctx, func(pp redis.Pipeliner) error {
		masters = pp.ZRangeWithScores(ctx, p+failwatch.MastersKey, 0, -1)
		changes = pp.HGetAll(ctx, p+failwatch.LeaderChangesKey)
		rescued = pp.Get(ctx, p+failwatch.RescuedKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return f, 0, fmt.Errorf("failovers: %w", err)
	}
	if ms := masters.Val(); len(ms) > 1 {
		f.RedisMasterChanges = len(ms) - 1 // the first is the fleet's first master
		f.RedisLastChange = time.UnixMilli(int64(ms[len(ms)-1].Score)).UTC()
	}
	c := changes.Val()
	f.StreamLeaderChanges, _ = strconv.ParseInt(c["*"], 10, 64)
	if ms, err := strconv.ParseInt(c["*at"], 10, 64); err == nil {
		f.StreamLastChange = time.UnixMilli(ms).UTC()
	}
	n, _ := strconv.ParseInt(rescued.Val(), 10, 64)
	return f, n, nil
}
