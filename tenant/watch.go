package tenant

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// EventOp is what happened to a tenant record.
type EventOp int

// The operations of an Event.
const (
	// EventPut: the tenant exists, with the record in Event.Tenant (a
	// current record when the watch starts, then each creation or update).
	EventPut EventOp = iota + 1
	// EventDelete: the tenant was deleted.
	EventDelete
	// EventSynced: every record that existed when the watch started has
	// been delivered; a tenant not seen by now does not exist. Sent once.
	EventSynced
)

func (o EventOp) String() string {
	switch o {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventSynced:
		return "synced"
	}
	return fmt.Sprintf("EventOp(%d)", int(o))
}

// Event is one change of the registry.
type Event struct {
	Op EventOp
	// Name is the tenant's name (empty for EventSynced).
	Name string
	// Tenant is the record of an EventPut.
	Tenant Tenant
	// Revision is the bucket's revision of the change.
	Revision uint64
	// Err is set on an EventPut whose record does not decode or is invalid
	// (it wraps ErrInvalid); Tenant then holds only the Name.
	Err error
}

// Watch delivers every current tenant (EventPut), then EventSynced, then
// each change, in order, until ctx is done; then it closes the channel. It
// also closes it if the watch fails for good (the connection was closed).
// Receive promptly: the watch waits for the receiver.
func (r *Registry) Watch(ctx context.Context) (<-chan Event, error) {
	w, err := r.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("tenant: watch: %w", err)
	}
	out := make(chan Event)
	go forward(ctx, w, out)
	return out, nil
}

func forward(ctx context.Context, w jetstream.KeyWatcher, out chan<- Event) {
	defer close(out)
	defer stopWatcher(w)
	for {
		var ev Event
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			ev = toEvent(e)
		}
		select {
		case <-ctx.Done():
			return
		case out <- ev:
		}
	}
}

func toEvent(e jetstream.KeyValueEntry) Event {
	if e == nil {
		return Event{Op: EventSynced}
	}
	ev := Event{Op: EventPut, Name: e.Key(), Revision: e.Revision()}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		ev.Op = EventDelete
	default:
		ev.Tenant, ev.Err = decodeRecord(e.Key(), e.Value())
		if ev.Err != nil {
			ev.Tenant = Tenant{Name: e.Key()}
		}
	}
	return ev
}

// WatchFunc is Watch as a callback: it calls fn with every current tenant,
// returns nil once they were delivered, and goes on calling fn with each
// change in the background until ctx is done. fn is called from one
// goroutine, in order, never with EventSynced; an event whose record is
// invalid comes with Err set (see Event). It returns an error if the watch
// cannot start or ends before the current tenants were delivered.
func (r *Registry) WatchFunc(ctx context.Context, fn func(Event)) error {
	events, err := r.Watch(ctx)
	if err != nil {
		return err
	}
	for ev := range events {
		if ev.Op == EventSynced {
			go func() {
				for ev := range events {
					fn(ev)
				}
			}()
			return nil
		}
		fn(ev)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tenant: watch: %w", err)
	}
	return errors.New("tenant: watch ended before the current tenants were delivered (connection closed?)")
}
