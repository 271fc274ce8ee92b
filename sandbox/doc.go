// Package sandbox runs job commands in fresh, capped, network-less,
// read-only Docker containers that are never reused.
//
// Every container runs paddock-init (cmd/paddock-init) as PID 1, bind-mounted
// read-only at /.paddock/init. The worker holds the container's attached
// stdin and stdout and sends framed requests (package initproto): a command
// then costs about one fork+exec instead of a docker exec (~80 ms here) or a
// docker run (~0.4 s). A Runtime keeps a warm pool of pre-started containers
// per Profile (image + limits); a job takes one never-used container, may run
// several commands in it (a Session, for the healer), and the container is
// force-removed off the critical path when the session closes, whatever the
// path: success, failure, panic, cancellation or shutdown. If the worker
// process dies, the attach stream closes, init sees EOF on stdin, kills
// everything and exits, and Docker auto-removes the container; a Reaper
// removes whatever still carries the label of an owner whose heartbeat is gone.
//
// Each command ends with exactly one Reason. OOM kills and pids exhaustion
// come from the container cgroup's own counters, read by init before and
// after every command, never from exit code 137.
package sandbox
