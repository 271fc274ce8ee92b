// Command paddock is Paddock's one binary: the all-in-one dev stack (up),
// the scheduler, worker, gateway and broker services, and the pipeline CLI
// (submit, get, wait, …). The command tree is package cli; this file is the
// process: its signals and its exit code.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/paddockhq/paddock/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
