package agentsociety

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A drainer is a goroutine that handles an agent's messages, one at a time,
// until the agent's queue is empty, so an idle agent holds no goroutine.
//
// A drainer also carries work on. When a handler sends to an idle agent, the
// receiver does not get a goroutine of its own at once: it is held by the
// handler's turn, and the drainer takes it up when the handler returns and
// its own agent's queue is empty. A conversation between two agents then runs
// on one goroutine, which neither starts, stops nor wakes another; starting
// a goroutine per message was over a third of the cost of routing one. A
// handler that blocks after it sends must not keep the receiver waiting, so
// Collaborate releases the held agent before it waits, and the sweeper
// releases what any other handler has held for longer than sweepEvery.
// Turns whose drainer could not take a held agent up at once hold nothing:
// model-driven turns, and every turn on a durable store, whose end is
// written to the store first. The sweeper runs only while some turn holds an
// agent.

// drainer is one drainer goroutine, as the sweeper sees it.
type drainer struct {
	turn atomic.Pointer[turn] // the turn being handled, or nil
	seen *turn                // the turn the sweeper saw last; guarded by scheduler.mu
}

// scheduler tracks the live drainers for the sweeper.
type scheduler struct {
	mu       sync.Mutex
	drainers map[*drainer]struct{}
	// sweeping is set while a sweeper runs. It is read on every hold and
	// written only when a sweeper starts or stops.
	sweeping atomic.Bool
}

// sweepEvery bounds how long a handler that blocks keeps an agent it held
// from being drained: between one and two periods.
const sweepEvery = time.Millisecond

// closedTurn marks a turn that holds nothing more: it ended, or it never
// holds anything (see handle).
var closedTurn = new(agent)

// hold makes t hold a, an agent whose queue just got a message and which no
// drainer drains, for t's drainer to take up when t ends. It reports false
// if t is nil or does not hold a: the caller then starts a drainer for a.
func (t *turn) hold(a *agent) bool {
	return t != nil && t.next.CompareAndSwap(nil, a)
}

// take removes and returns the agent t holds, or nil, and leaves t open.
func (t *turn) take() *agent {
	for {
		a := t.next.Load()
		if a == nil || a == closedTurn {
			return nil
		}
		if t.next.CompareAndSwap(a, nil) {
			return a
		}
	}
}

// holds reports whether t holds an agent.
func (t *turn) holds() bool {
	a := t.next.Load()
	return a != nil && a != closedTurn
}

// end closes t and returns the agent it held, or nil.
func (t *turn) end() *agent {
	if a := t.next.Swap(closedTurn); a != closedTurn {
		return a
	}
	return nil
}

// release starts a drainer for the agent t holds, if any, so that it is not
// kept waiting while t's handler blocks. It is a no-op for a nil t, and once
// the society is closed. It may be called from any goroutine, so it holds
// s.mu to start the drainer, as start requires.
func (s *Society) release(t *turn) {
	if t == nil || !t.holds() {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return // the turn's drainer stops the agent when the turn ends
	}
	if a := t.take(); a != nil {
		s.start(a)
	}
}

// start gets a's queue drained by a new drainer. Called either with s.mu held
// and s.closed false, or by a goroutine Close waits for (a drainer or the
// sweeper), so that the new drainer is counted before Close can stop
// waiting.
func (s *Society) start(a *agent) {
	s.wg.Add(1)
	go s.run(a)
}

// run is a drainer's life: it drains a, then each agent the last handler held.
func (s *Society) run(a *agent) {
	defer s.wg.Done()
	growStack()
	d := &drainer{}
	if s.volatile { // elsewhere no turn holds anything, and the sweeper has nothing to watch
		s.register(d)
		defer s.unregister(d)
	}
	for a != nil {
		a = s.drain(d, a)
	}
}

// drain handles a's messages one at a time until a's queue is empty or the
// society closes, and returns the agent the last handler held, if any, for
// d to drain next. If a has messages left when a handler held an agent, the
// held agent gets a drainer of its own.
func (s *Society) drain(d *drainer, a *agent) *agent {
	box := a.inbox()
	var next *agent
	for {
		if s.closed.Load() {
			box.Stop()
			if next != nil {
				next.inbox().Stop()
			}
			return nil
		}
		m, ok := box.TryNext()
		if !ok {
			if next == nil {
				// Nothing else to do: yield once before giving up
				// the goroutine, since an answer to what a just
				// handled often comes meanwhile.
				runtime.Gosched()
			}
			if m, ok = box.Next(); !ok {
				return next
			}
		}
		if next != nil {
			s.start(next)
		}
		next = s.deliver(d, a, m)
	}
}

// register adds d to the drainers the sweeper watches.
func (s *Society) register(d *drainer) {
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	if s.sched.drainers == nil {
		s.sched.drainers = make(map[*drainer]struct{})
	}
	s.sched.drainers[d] = struct{}{}
}

func (s *Society) unregister(d *drainer) {
	s.sched.mu.Lock()
	delete(s.sched.drainers, d)
	s.sched.mu.Unlock()
}

// sweepHeld starts a sweeper, after a turn held an agent, unless one runs.
// Called with s.mu held and s.closed false, so the sweeper is counted before
// Close can wait.
func (s *Society) sweepHeld() {
	if !s.sched.sweeping.Load() && s.sched.sweeping.CompareAndSwap(false, true) {
		s.wg.Add(1)
		go s.sweep()
	}
}

// sweep runs while some turn holds an agent: every sweepEvery it releases
// the agent held by each turn that was already running at the previous
// sweep, since that turn's handler is slow or blocked.
func (s *Society) sweep() {
	defer s.wg.Done()
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	var late []*agent
	for {
		select {
		case <-s.done:
			s.sched.sweeping.Store(false)
			return
		case <-tick.C:
		}
		var held bool
		late, held = s.lateAgents(late[:0])
		for _, a := range late {
			s.start(a)
		}
		clear(late)
		if !held && !s.keepSweeping() {
			return
		}
	}
}

// keepSweeping marks the sweeper stopped, then looks once more for a held
// agent: a turn that held one after lateAgents looked may have seen the
// sweeper still running and started none. It reports whether this sweeper
// must go on.
func (s *Society) keepSweeping() bool {
	s.sched.sweeping.Store(false)
	return s.anyHeld() && s.sched.sweeping.CompareAndSwap(false, true)
}

// lateAgents appends to late the agents held by turns seen at the previous
// sweep, taking them from their turns, and reports whether any turn still
// holds an agent.
func (s *Society) lateAgents(late []*agent) ([]*agent, bool) {
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	held := false
	for d := range s.sched.drainers {
		t := d.turn.Load()
		if t != nil && t == d.seen {
			if a := t.take(); a != nil {
				late = append(late, a)
			}
		}
		d.seen = t
		held = held || (t != nil && t.holds())
	}
	return late, held
}

// anyHeld reports whether any turn holds an agent.
func (s *Society) anyHeld() bool {
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	for d := range s.sched.drainers {
		if t := d.turn.Load(); t != nil && t.holds() {
			return true
		}
	}
	return false
}

// stackReserve is more than a message's path needs (handler, send, payload
// check, store), measured with the routing benchmark's profile.
const stackReserve = 6 << 10

// growStack makes a new goroutine's stack big enough for a message's path at
// once. A goroutine starts with a small stack that the runtime doubles when
// a call needs more, copying it and adjusting every frame on it; grown deep
// in that path, the copies took nearly half the CPU of routing a message.
// Grown here, with one frame on the stack, the copy is nearly free.
//
//go:noinline
func growStack() {
	var reserve [stackReserve]byte
	touch(reserve[:])
}

// touch reads b, so that the compiler keeps growStack's frame.
//
//go:noinline
func touch(b []byte) byte { return b[len(b)-1] }
