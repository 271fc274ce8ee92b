package scheduler_test

import (
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
)

// The results store is every store the scheduler's parts declare.
var (
	_ scheduler.Recorder    = (*results.Store)(nil)
	_ scheduler.ResultStore = (*results.Store)(nil)
	_ scheduler.Claimer     = (*results.Store)(nil)
	_ scheduler.CancelFlags = (*results.Store)(nil)
	_ scheduler.Admitter    = (*results.Store)(nil)
	_ scheduler.Settled     = (*results.Store)(nil)
	_ scheduler.CancelStore = (*results.Store)(nil)
	_ scheduler.Indexer     = (*results.Store)(nil)
	_ scheduler.ListStore   = (*results.Store)(nil)
)
