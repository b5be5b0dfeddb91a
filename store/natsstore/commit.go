package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"agentsociety/store"
)

// Group commit. Apply queues its change and then takes s.mu; whoever holds
// s.mu writes every change queued (commitQueue). So the Applies that
// arrive while a write is in flight go out together in the next round,
// with one wait for all their answers, instead of one round trip each.
//
// Each change is still its own write, a plain message or its own atomic
// batch, with its own answer from the server: one change's failure is not
// another's. A round holds only changes whose keys differ, since a change
// is planned against the revisions of its keys as the index knows them
// before the round. With Options.Fence the first write of each change
// expects the stream's last sequence that the changes before it in the
// round leave, so the fence holds for every write; a change refused there
// makes those after it refused too, and they are tried again one by one.

// An applyReq is an Apply waiting for its change to be written.
type applyReq struct {
	ctx context.Context
	c   *store.Change
	// done and err are the result; guarded by s.mu.
	done bool
	err  error
}

// finish sets r's result; a request written in parts (see commitRound)
// keeps the first error of its parts.
func (r *applyReq) finish(err error) {
	if !r.done || r.err == nil {
		r.err = err
	}
	r.done = true
}

// planned is a request with the writes of its change.
type planned struct {
	r    *applyReq
	p    *plan
	ws   []write // the batch
	rest []write // dropped history messages left for later (see batchOf)
}

// commitQueue writes every change queued and finishes its request. Called
// with s.mu held.
func (s *Store) commitQueue() {
	s.qmu.Lock()
	reqs := s.queue
	s.queue = nil
	s.qmu.Unlock()
	for len(reqs) > 0 {
		reqs = s.commitRound(reqs)
	}
}

// commitRound writes the first requests of reqs in one round: those up to
// the first whose keys a request before it writes too. It returns the
// requests left. Called with s.mu held.
func (s *Store) commitRound(reqs []*applyReq) []*applyReq {
	if !s.indexed {
		// applyOne reads the bucket first; the next round plans on it.
		reqs[0].finish(s.applyOne(reqs[0].ctx, reqs[0].c))
		return reqs[1:]
	}
	var round []planned
	keys := make(map[string]bool)
	n := 0
	for ; n < len(reqs); n++ {
		r := reqs[n]
		if err := r.ctx.Err(); err != nil {
			r.finish(err)
			continue
		}
		if err := s.confirmPending(r.ctx, r.c.Accepted); err != nil {
			r.finish(err)
			continue
		}
		p, err := s.plan(r.c)
		var ws, rest []write
		if err == nil {
			ws, rest, err = s.batchOf(p)
		}
		if err != nil || len(ws) == 0 {
			r.finish(err) // refused, or nothing to write
			continue
		}
		if slices.ContainsFunc(ws, func(w write) bool { return keys[w.key] }) {
			break
		}
		for _, w := range ws {
			keys[w.key] = true
		}
		if onlyFinishes(r.c) {
			// Each message's end is its own write: a batch of them would
			// cost a server on file storage a sync (see BenchmarkApply).
			for _, w := range ws {
				round = append(round, planned{r: r, p: &plan{}, ws: []write{w}})
			}
			continue
		}
		round = append(round, planned{r: r, p: p, ws: ws, rest: rest})
	}
	s.pipeline(round)
	return reqs[n:]
}

// pipeline sends the writes of round, then waits for their answers, and
// finishes each request: committed, refused, or of unknown outcome. A
// change refused where its own write would have been accepted is tried
// again on its own (see applyOne). Called with s.mu held.
func (s *Store) pipeline(round []planned) {
	if len(round) == 0 {
		return
	}
	if s.opts.Fence && s.isFenced() {
		for _, pl := range round {
			pl.r.finish(fmt.Errorf("%w", ErrFenced))
		}
		return
	}
	// The round is everyone's: no one request's context ends it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(round[0].r.ctx), s.opts.Timeout)
	defer cancel()
	if s.replies == nil {
		s.inbox = s.nc.NewInbox()
		sub, err := s.nc.SubscribeSync(s.inbox + ".>")
		if err != nil {
			for _, pl := range round {
				pl.r.finish(fmt.Errorf("natsstore: subscribing to the server's answers: %w", err))
			}
			return
		}
		s.replies = sub
	}
	s.round++
	prefix := s.inbox + "." + strconv.FormatUint(s.round, 10) + "."

	// Send: sent counts the changes whose every message went out.
	sent, last := 0, s.last
	var sendErr error
send:
	for i, pl := range round {
		ms := s.messages(pl.ws, s.opts.Fence, last)
		ms[len(ms)-1].Reply = prefix + strconv.Itoa(i)
		for _, m := range ms {
			if sendErr = s.nc.PublishMsg(m); sendErr != nil {
				break send
			}
		}
		sent++
		last += uint64(len(pl.ws))
	}

	// Wait for the answers to what went out.
	answers := make([][]byte, sent)
	var waitErr error
	for got := 0; got < sent; {
		m, err := s.replies.NextMsgWithContext(ctx)
		if err != nil {
			waitErr = err
			break
		}
		i, err := strconv.Atoi(strings.TrimPrefix(m.Subject, prefix))
		if !strings.HasPrefix(m.Subject, prefix) || err != nil || i < 0 || i >= sent || answers[i] != nil {
			continue // an answer to an earlier round that was given up on
		}
		answers[i] = m.Data
		got++
	}

	var garbage []write
	defer func() { s.collect(ctx, garbage) }()
	for i, pl := range round {
		if i >= sent {
			// Not sent whole (the connection failed): each on its own,
			// which tells what became of the connection.
			for _, pl := range round[i:] {
				pl.r.finish(s.applyOne(pl.r.ctx, pl.r.c))
			}
			return
		}
		var seq uint64
		err := waitErr
		if answers[i] != nil {
			seq, err = readAck(answers[i], len(pl.ws))
		}
		var rej *rejection
		switch {
		case err == nil:
			if s.opts.Fence {
				s.last = seq
			}
			s.committed(pl.p, pl.ws, seq)
			garbage = append(garbage, pl.rest...)
			pl.r.finish(nil)
		case errors.As(err, &rej) && s.opts.Fence:
			// Nothing of it was stored, so the writes after it expected a
			// last sequence the stream does not have: each on its own,
			// which tells a refused change from a fenced store.
			for _, pl := range round[i:] {
				pl.r.finish(s.applyOne(pl.r.ctx, pl.r.c))
			}
			return
		case errors.As(err, &rej):
			pl.r.finish(s.applyOne(pl.r.ctx, pl.r.c))
		default:
			// No answer, or one that does not parse: this change and
			// those after it may or may not have been stored.
			err = fmt.Errorf("natsstore: committing a change: %w", err)
			if s.opts.Fence {
				err = s.fence(err)
			} else {
				s.indexed = false
			}
			for _, pl := range round[i:] {
				pl.r.finish(err)
			}
			return
		}
	}
}

// onlyFinishes reports whether c does nothing but finish messages, which
// the store may record one by one (see [store.Store]).
func onlyFinishes(c *store.Change) bool {
	return len(c.Finished) > 0 &&
		len(c.Roles)+len(c.Agents)+len(c.Contacts)+len(c.Requests)+len(c.Accepted)+len(c.Histories)+len(c.States)+len(c.HistoryAppends) == 0
}
