package agentsociety

import (
	"sync"
	"sync/atomic"
	"time"
)

// drainers runs agents' mailboxes. A drainer is a goroutine that handles one
// agent's messages until its queue is empty. Rather than exit then, it parks
// for a while, so that the next agent woken by a message (in a busy society,
// very soon) reuses a goroutine whose stack has already grown instead of
// paying for a new one. At most maxParked drainers park at once, and a
// parked drainer exits after parkFor without work, so an idle society
// holds no goroutine for long and an idle agent never holds one.
type drainers struct {
	wg      sync.WaitGroup // every drainer, running or parked
	handoff chan *agent    // unbuffered: to a parked drainer
	parked  atomic.Int32
	stop    chan struct{} // closed by Close: parked drainers exit
}

const (
	maxParked = 16
	parkFor   = 50 * time.Millisecond
)

func newDrainers() drainers {
	return drainers{handoff: make(chan *agent), stop: make(chan struct{})}
}

// start gets a's queue drained: by a parked drainer if one is waiting, or by
// a new one. Called with s.mu held and s.closed false.
func (s *Society) start(a *agent) {
	select {
	case s.handoff <- a:
	default:
		s.wg.Add(1)
		go s.runDrainer(a)
	}
}

func (s *Society) runDrainer(a *agent) {
	defer s.wg.Done()
	var timer *time.Timer
	for {
		s.drain(a)
		if s.closed.Load() || s.parked.Add(1) > maxParked {
			s.parked.Add(-1)
			return
		}
		if timer == nil {
			timer = time.NewTimer(parkFor)
		} else {
			timer.Reset(parkFor)
		}
		select {
		case a = <-s.handoff:
			s.parked.Add(-1)
			timer.Stop()
		case <-timer.C:
			s.parked.Add(-1)
			return
		case <-s.stop:
			s.parked.Add(-1)
			return
		}
	}
}
