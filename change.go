package agentsociety

import (
	"context"

	"agentsociety/store"
)

// Every change to the society (a role, a spawn, a message accepted, a
// request settled, a state key, a termination) goes one way, through apply:
//
//  1. check, under s.mu: validate the operation against the current state
//     and work out what it changes, as a change;
//  2. record, with no lock held: the change's store.Change goes to the store;
//  3. commit, under s.mu: the change is applied to memory;
//  4. log, with no lock held: the caller logs what happened.
//
// While a change is being recorded, its claims keep any other change that
// claims the same thing from being checked: that one waits until the first
// is committed (or failed), then checks again against the new state. A
// claim is an agent, or a key written by the change (a role's name for its
// creator, a state key, a request id). A message claims its receiver (and
// any other agent whose contacts it adds), so that messages to one agent
// are queued in the order they were numbered; a spawn claims the parent,
// and a termination the agents it ends. A backend that shares state
// between processes would turn the record into a compare-and-set on the
// claimed keys.

// A change is what checking an operation found it changes.
type change struct {
	// claims name what the check read to decide and the commit writes,
	// besides the receiver of send, which is claimed too.
	claims []string
	// agents is the number of agents the change adds: counted against
	// Config.MaxAgents while the change is in flight.
	agents int
	// record is what the store keeps of the change.
	record store.Change
	// commit applies the change to memory, after the store recorded it.
	// Called with s.mu held; nil when memory does not change.
	commit func()
	// send is a message the change accepts: after commit, commitSend
	// makes its changes and routes it.
	send *pendingSend
}

// Claim keys. Agents are claimed by id; other keys carry a prefix that no
// agent id has.
func claimRole(creator, name string) string { return "role:" + creator + "\x00" + name }
func claimState(scope, key string) string   { return "state:" + scope + "\x00" + key }
func claimRequest(id string) string         { return "request:" + id }

// apply runs one operation the way every change goes (see above). check runs
// with s.mu held; it changes nothing in the organisation (it may
// draw ids and message numbers, so these can have gaps), and may run more
// than once, since apply checks again after waiting for a change in flight
// that claims what check's change claims. A nil change from check means
// there is nothing to change (the operation found its result already
// there). A change whose record is empty (a message on a volatile store) is
// committed in the same hold of s.mu as its check.
//
// apply refuses with ErrClosed once the society is closed. A change being
// recorded when Close begins is still committed; Close waits for it, within
// its own deadline.
func (s *Society) apply(ctx context.Context, check func() (*change, *Error)) *Error {
	return s.applyAs(ctx, check, false)
}

// applyClosing is apply for a change that must be made even once Close
// has begun, by a goroutine Close waits for: the spending of a model call
// that was answered.
func (s *Society) applyClosing(ctx context.Context, check func() (*change, *Error)) *Error {
	return s.applyAs(ctx, check, true)
}

func (s *Society) applyAs(ctx context.Context, check func() (*change, *Error), closing bool) *Error {
	for {
		if err := ctx.Err(); err != nil {
			return canceled(err)
		}
		s.mu.Lock()
		if s.closed.Load() && !closing {
			s.mu.Unlock()
			return errClosed()
		}
		c, err := check()
		if err != nil || c == nil {
			s.mu.Unlock()
			return err
		}
		if busy := s.claimed(c); busy != nil {
			s.mu.Unlock()
			if closing {
				select { // a change in flight is committed, closed or not
				case <-busy:
				case <-ctx.Done():
					return canceled(ctx.Err())
				}
			} else if err := s.waitFor(ctx, busy); err != nil {
				return err
			}
			continue
		}
		if c.record.Empty() {
			s.commit(c)
			s.mu.Unlock()
			s.started(c)
			return nil
		}
		done := s.claim(c)
		s.mu.Unlock()
		return s.recordAndCommit(ctx, c, done)
	}
}

// waitFor waits until busy, the done channel of a change in flight, is
// closed, or the society closes.
func (s *Society) waitFor(ctx context.Context, busy chan struct{}) *Error {
	select {
	case <-busy:
	case <-s.done: // apply's next round sees closed
	case <-ctx.Done():
		return canceled(ctx.Err())
	}
	return nil
}

// claim records c's claims and counts c as in flight, and returns the
// channel closed when c is done. Called with s.mu held and s.closed false.
func (s *Society) claim(c *change) chan struct{} {
	done := make(chan struct{})
	for _, k := range c.claims {
		s.claims[k] = done
	}
	if c.send != nil {
		s.claims[c.send.msg.To] = done
	}
	s.adding += c.agents
	s.wg.Add(1) // Close waits for the commit
	return done
}

// recordAndCommit records c, claimed with done, in the store, then commits
// it if the store took it, and releases its claims.
func (s *Society) recordAndCommit(ctx context.Context, c *change, done chan struct{}) *Error {
	err := s.store.Apply(ctx, c.record)
	s.mu.Lock()
	s.unclaim(c)
	if err == nil {
		s.commit(c)
	}
	s.mu.Unlock()
	s.started(c)
	close(done)
	s.wg.Done()
	if err != nil {
		return storeError(err)
	}
	return nil
}

// unclaim releases c's claims, and no longer counts the agents it adds.
// Called with s.mu held; the caller then closes the channel claim
// returned, and calls s.wg.Done.
func (s *Society) unclaim(c *change) {
	for _, k := range c.claims {
		delete(s.claims, k)
	}
	if c.send != nil {
		delete(s.claims, c.send.msg.To)
	}
	s.adding -= c.agents
}

// commit applies c to memory. Called with s.mu held.
func (s *Society) commit(c *change) {
	if c.commit != nil {
		c.commit()
	}
	if c.send != nil {
		s.commitSend(c.send)
	}
}

// started starts the drainer that committing c's message called for. Called
// with s.mu released.
func (s *Society) started(c *change) {
	if c.send != nil && c.send.start {
		s.startDrainer(c.send.to)
	}
}

// claimed returns the done channel of a change in flight that claims what
// c claims, or nil. Called with s.mu held.
func (s *Society) claimed(c *change) chan struct{} {
	if len(s.claims) == 0 {
		return nil
	}
	if c.send != nil {
		if done := s.claims[c.send.msg.To]; done != nil {
			return done
		}
	}
	for _, k := range c.claims {
		if done := s.claims[k]; done != nil {
			return done
		}
	}
	return nil
}

// record writes ch to the store outside the change path, for records that
// change nothing in memory: the end of a message's handling, an agent's
// history. An empty change costs nothing.
//
// The end of a turn's message is recorded with the turn's history, so that
// a message found finished after a crash has its turn in the history. When
// such a record fails, the agent's next history record carries the turn
// again (see mind.record), and record adds to it the ends the failed one
// carried: else those messages would stay pending, and a society reopened
// on the store would handle them again after the turns that followed, with
// histories that hold them already. A change that only finishes messages
// and fails is handed to the finisher, which writes it behind (see
// finisher): record then reports no error.
func (s *Society) record(ctx context.Context, ch store.Change) error {
	if ch.Empty() {
		return nil
	}
	var agent string
	if len(ch.HistoryAppends) > 0 {
		agent = ch.HistoryAppends[0].AgentID
		if ids := s.finishing.takeCarried(agent); len(ids) > 0 {
			ch.Finished = append(ids, ch.Finished...)
		}
	}
	err := s.store.Apply(ctx, ch)
	switch {
	case err == nil:
	case agent != "":
		s.finishing.carry(agent, ch.Finished)
	case onlyFinishes(&ch) && !s.finishing.closing():
		// The end of a message is a fact of its own (see store.Store):
		// written behind, it is tried again, as the ends of handled
		// messages are (see finisher).
		for _, id := range ch.Finished {
			s.finishing.add(id)
		}
		return nil
	}
	return err
}

// onlyFinishes reports whether ch does nothing but finish messages. It
// does not copy ch, whose size would grow the frame of record, which every
// turn calls.
func onlyFinishes(ch *store.Change) bool {
	finished := ch.Finished
	ch.Finished = nil
	rest := ch.Empty()
	ch.Finished = finished
	return len(finished) > 0 && rest
}

func errClosed() *Error { return newError(ErrClosed, "the society is closed") }

func canceled(err error) *Error {
	return &Error{Code: ErrCanceled, Message: "the context ended before the change was made", Err: err}
}
