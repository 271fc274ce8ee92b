package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlotsServeWaitersInOrder(t *testing.T) {
	s := newSlots(1)
	stop := make(chan struct{})
	require.True(t, s.acquire(stop))
	got := make(chan int, 3)
	for i := range 3 {
		go func() {
			if s.acquire(stop) {
				got <- i
			}
		}()
		require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.waiters) == i+1 }, time.Second, time.Millisecond)
	}
	for want := range 3 {
		s.release()
		assert.Equal(t, want, <-got, "first come, first served")
	}
}

func TestSlotsResizeAndStop(t *testing.T) {
	s := newSlots(1)
	stop := make(chan struct{})
	require.True(t, s.acquire(stop))
	granted := make(chan bool, 2)
	go func() { granted <- s.acquire(stop) }()
	go func() { granted <- s.acquire(stop) }()
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.waiters) == 2 }, time.Second, time.Millisecond)
	s.setLimit(2)
	assert.True(t, <-granted, "a larger limit grants a waiter")
	close(stop)
	assert.False(t, <-granted, "stop ends a wait without a slot")
	s.mu.Lock()
	assert.Equal(t, 2, s.inUse)
	assert.Empty(t, s.waiters)
	s.mu.Unlock()

	s.setLimit(0)
	for range 100 {
		assert.True(t, s.acquire(nil), "0 is no bound")
	}
}
