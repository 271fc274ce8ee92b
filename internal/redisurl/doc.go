// Package redisurl parses the --redis-url forms Paddock accepts and builds
// the one *redis.Client every Redis user of a process shares (the asynq
// client, server and inspector, results, locks, the rate window, the index,
// the rescuer, the wake gate, the dashboard):
//
//	redis://[user:password@]host[:port][/db][?go-redis options]   one server
//	rediss://…                                                    the same over TLS
//	unix:///path/to/socket                                        a local socket
//	redis+sentinel://[user:password@]host[:port][,host[:port]…]/<master>[/<db>][?sentinel options]
//	rediss+sentinel://…                                           the same over TLS
//	redis-sentinel://[:password@]host[:port][,host[:port]…][/<db>]?master=<name>   asynq's form
//
// The hosts of a Sentinel URL are the Sentinels (port 26379 when none is
// given); the client asks them for the master named in the URL and follows
// a failover to whichever replica they promote. The URL's user and
// password authenticate to the master and replicas (Paddock's Redis ACL
// users). The Sentinels take their own credentials from the query
// parameters sentinel_user and sentinel_password; without them the client
// talks to the Sentinels unauthenticated. (asynq reads the password of its
// redis-sentinel:// form as the Sentinels' password; here, as in every
// other form, it is the data nodes'.)
//
// Every bad URL is a *Error naming the flag; Diagnose turns the failover
// client's catch-all "all sentinels are unreachable" into what each
// Sentinel said (it does not know the master, it wants a password, it does
// not answer).
package redisurl
