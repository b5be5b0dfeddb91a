package natsstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"agentsociety/store"

	"github.com/nats-io/nats.go"
)

// Group commit, pipelined. Apply queues its change and then takes s.mu;
// whoever holds s.mu sends every change queued as one flight (sendQueue),
// and releases s.mu while the server answers. So the Applies that arrive
// while a flight is in the air go out together in the next flight, sent at
// once: flights overlap, and the server is never left waiting for the
// answers to the last one to reach this process before it gets the next.
//
// Each change of a flight is still its own write, a plain message or its
// own atomic batch, with its own answer from the server: one change's
// failure is not another's. A change is planned against the revisions of
// its keys as the index knows them before it is sent, so a change whose
// keys a flight in the air writes waits for that flight to settle (it and
// every change queued after it: the queue goes out in order).
//
// Flights settle in the order they were sent, one at a time, by the
// goroutine that holds the settler's role (see await): it reads the
// answers, records in the index what was written, and finishes each
// request. The role goes to any Apply that finds it free; one that leaves
// it with flights still in the air hands it to the requests of the oldest.
//
// With Options.Fence, the first message of each change expects two things
// of the stream: its last sequence to be the one the changes sent before
// it leave, in its flight and in the flights before it (s.sent), and the
// fence key's revision to be the one this store's claim wrote. The second
// is what keeps the fence: a store deposed by another's claim writes
// nothing, whatever the other wrote since (the first alone could be lined
// up again by another store's writes after a change was refused). It
// stands in for the message's check of its own key's revision, which only
// another writer could fail, and no other writer writes without claiming
// first. A change refused makes those sent after it refused too, in its
// flight and in the flights after it (the stream's last sequence is not
// the one they expect): its flight's settling marks them stale, no flight
// is sent until they have all settled, and each change they held is tried
// again one by one, which tells a refused change from a deposed store.
//
// On a bucket whose stream has several replicas, changes go instead in
// rounds, one at a time, each round one atomic batch of at most
// Options.MaxBatch writes (commitBatch): a replicated stream takes one
// expectation of a subject's sequence at a time, refusing a second while
// the first is in flight, and every change expects the fence key's.

// An applyReq is an Apply waiting for its change to be written.
type applyReq struct {
	ctx context.Context
	c   *store.Change
	enc *encoding // c's records, encoded
	// The rest is guarded by s.mu. done and err are the result; flight
	// is the flight that carries the change once it is sent, and
	// blocker the flight it waits for before it may be sent.
	done    bool
	err     error
	flight  *flight
	blocker *flight
	// journal is the journal the change was written through, if it
	// was: the Apply deletes what it removed once it has its result
	// (see cleanupLater).
	journal *journal
}

// finish sets r's result; a request written in parts (see gather) keeps
// the first error of its parts.
func (r *applyReq) finish(err error) {
	if !r.done || r.err == nil {
		r.err = err
	}
	r.done = true
}

// applyOneFor writes c, r's change or a part of it, on its own
// (applyOne), and finishes r. Called with s.mu held.
func (s *Store) applyOneFor(r *applyReq, c *store.Change, p *plan) {
	j, err := s.applyOne(r.ctx, c, p)
	if j != nil {
		r.journal = j
	}
	r.finish(err)
}

// planned is a request with the writes of its change, or of one part of
// it (see gather).
type planned struct {
	r *applyReq
	// c is what the writes record: r's change, or, for a part that
	// records one message's end, nil and the message is msg, or, for a
	// part that records the ends of some, nil and they are msgs (see
	// change).
	c    *store.Change
	msg  string
	msgs []string
	p    *plan
	ws   []write // the batch
	rest []write // dropped history messages left for later (see batchOf)
	// journal: the change is written through a journal, on its own (see
	// gather), and ws is empty.
	journal bool
}

// change returns what pl's writes record.
func (pl *planned) change() *store.Change {
	switch {
	case pl.c == nil && pl.msgs != nil:
		return &store.Change{Finished: pl.msgs}
	case pl.c == nil:
		return &store.Change{Finished: []string{pl.msg}}
	}
	return pl.c
}

// A flight is changes sent together and not yet settled.
type flight struct {
	no    uint64 // numbers the subjects of its answers
	round []planned
	keys  []string // the keys its changes write
	sent  int      // the changes whose every message went out
	// deadline bounds the wait for its answers: the flight is
	// everyone's, so no one request's context ends it.
	deadline time.Time
	acks     []ack // the server's answers, by change, read by the settler
	got      int
	waitErr  error // why the settler stopped waiting for answers

	// Guarded by s.mu. stale: sent expecting the writes of a change
	// that a flight before it had refused. turned: turn is closed.
	stale, turned, settled bool
	turn                   chan struct{} // closed to hand its requests the settler's role; made by the first to wait
	done                   chan struct{} // closed once settled
}

// An ack is the server's answer to a change: whether it came, and the
// sequence of the change's last write or why it was not written.
type ack struct {
	answered bool
	seq      uint64
	err      error
}

// pipelined reports whether s sends its changes in flights (see the top
// of this file), rather than in rounds of one batch.
func (s *Store) pipelined() bool { return !s.replicated }

// await returns once r is finished: it sends the queue, r among it, and
// settles the flights in the air, oldest first, until r's has settled. It
// waits while another goroutine settles. Called with s.mu held; returns
// with it released.
func (s *Store) await(r *applyReq) {
	for !r.done {
		if r.blocker != nil && r.blocker.settled {
			r.blocker = nil
		}
		if r.flight == nil && r.blocker == nil {
			s.sendQueue()
			continue
		}
		if !s.settling && len(s.flights) > 0 {
			s.settleOldest()
			continue
		}
		var done, turn <-chan struct{}
		f := r.flight
		if f != nil {
			done = f.done
			if !f.turned {
				if f.turn == nil {
					f.turn = make(chan struct{})
				}
				turn = f.turn
			}
		} else {
			done = r.blocker.done
		}
		s.mu.Unlock()
		select {
		case <-done:
			if f != nil {
				return // settled: r is finished, and its result is set
			}
		case <-turn:
		}
		s.mu.Lock()
	}
	// Settle the flights that the server has answered already, a few:
	// cheaper than waking the requests of the next to settle it.
	for range maxSettledOnLeaving {
		if s.settling || len(s.flights) == 0 || !s.answered(s.flights[0]) {
			break
		}
		s.settling = true // held throughout, s.mu with it
		s.collectAnswers(s.flights[0])
		s.settling = false
		s.settle(s.flights[0])
	}
	s.handOn()
	s.mu.Unlock()
}

// maxSettledOnLeaving bounds the flights an Apply that has its result
// settles for others before it returns.
const maxSettledOnLeaving = 4

// answered reports whether every answer to f's changes has come: it reads
// those the subscription holds, without waiting. Called with s.mu held by
// a goroutine that may take the settler's role, which no one holds.
func (s *Store) answered(f *flight) bool {
	for f.got < f.sent && f.waitErr == nil {
		if n, _, err := s.replies.Pending(); err != nil || n == 0 {
			return false
		}
		s.settling = true
		s.readAnswer(f)
		s.settling = false
	}
	return true
}

// handOn hands the settler's role, if no one holds it, to the requests of
// the oldest flight in the air. Called with s.mu held.
func (s *Store) handOn() {
	if s.settling || len(s.flights) == 0 {
		return
	}
	if f := s.flights[0]; !f.turned {
		// Its requests that wait wait on turn; one that comes later finds
		// the role free.
		f.turned = true
		if f.turn != nil {
			close(f.turn)
		}
	}
}

// quiesce settles every flight in the air, sending no other meanwhile,
// so that the caller may write on its own (publish) or read the bucket as
// this store's Applies left it. Called with s.mu held, which it releases
// while it waits.
func (s *Store) quiesce() {
	if len(s.flights) > 0 {
		s.draining = true
	}
	for len(s.flights) > 0 {
		if !s.settling {
			s.settleOldest()
			continue
		}
		done := s.flights[0].done
		s.mu.Unlock()
		<-done
		s.mu.Lock()
	}
}

// sendQueue sends the changes queued as one flight: those up to the first
// whose keys a change before it, or a flight in the air, writes. The
// others stay queued, waiting for that flight. While the flights in the
// air must settle before another is sent (s.draining), it sends nothing.
// Called with s.mu held.
func (s *Store) sendQueue() {
	s.qmu.Lock()
	reqs := s.queue
	s.queue = nil
	s.qmu.Unlock()
	if s.draining && len(s.flights) == 0 {
		s.draining = false // defensive: nothing is left to settle
	}
	var round []planned
	n, blocked := 0, false
	var blocker *flight
	if s.draining {
		blocked, blocker = true, s.flights[len(s.flights)-1]
	} else {
		round, n, blocker, blocked = s.gather(reqs)
	}
	if len(round) > 0 {
		f := s.launch(round)
		if blocked && blocker == nil {
			blocker = f // a change of this flight writes one of the keys
		}
	}
	if !blocked || n == len(reqs) {
		return
	}
	rest := slices.Clip(reqs[n:])
	for _, r := range rest {
		r.blocker = blocker
	}
	s.qmu.Lock()
	s.queue = append(rest, s.queue...)
	s.qmu.Unlock()
}

// gather plans the first requests of reqs into a round, and returns it
// and how many requests it took: those it planned, and those it finished
// (refused, with nothing to write, or written through a journal: see
// journal.go). It stops at the first request whose keys a request before
// it writes, or a flight in the air (blocker), or that would take the
// round of a replicated store over Options.MaxBatch writes, or that needs
// a journal while a request before it or a flight is not settled:
// blocked is then true, and blocker nil when the round is what it waits
// for. Called with s.mu held.
func (s *Store) gather(reqs []*applyReq) (round []planned, n int, blocker *flight, blocked bool) {
	keys := s.roundKeys
	clear(keys)
	defer func() {
		if len(keys) > 256 {
			s.roundKeys = make(map[string]bool) // clear costs what the map grew to
		}
	}()
	writes := 0 // of the round so far
	for ; n < len(reqs); n++ {
		parts, w := s.parts(reqs[n])
		if len(parts) == 0 {
			continue // finished
		}
		if parts[0].journal {
			// Written on its own, in batches one after the other, once
			// every change sent before it has settled.
			if len(round) > 0 {
				return round, n, nil, true
			}
			if len(s.flights) > 0 {
				return round, n, s.flights[len(s.flights)-1], true
			}
			r := reqs[n]
			s.applyOneFor(r, r.c, parts[0].p)
			continue
		}
		if s.replicated && len(round) > 0 && writes+w > s.opts.MaxBatch {
			return round, n, nil, true
		}
		if blocked, blocker = s.busy(keys, parts); blocked {
			return round, n, blocker, true
		}
		writes += w
		for i := range parts {
			for _, w := range parts[i].ws {
				keys[w.key] = true
				for _, e := range w.ends {
					keys[e.Key] = true
				}
			}
		}
		round = append(round, parts...)
	}
	return round, n, nil, false
}

// parts plans r's change and returns what a round sends of it, and how
// many writes that is: the change whole, or, for a change that only
// finishes messages, each message's end on its own (a batch of them would
// cost a server on file storage a sync: see BenchmarkApply), or, for a
// change that needs a journal, a part marked so, which the round does not
// send (see gather). It returns nothing and finishes r if the change is
// refused or writes nothing. Called with s.mu held.
func (s *Store) parts(r *applyReq) ([]planned, int) {
	if err := r.ctx.Err(); err != nil {
		r.finish(err)
		return nil, 0
	}
	p, err := s.prepare(r.ctx, r.c, r.enc) // reads the bucket, if at all, for the first only
	if err != nil || len(p.writes)+len(p.garbage) == 0 {
		r.finish(err) // refused, or nothing to write
		return nil, 0
	}
	if !onlyFinishes(r.c) {
		if s.needsJournal(r.c, p) {
			return []planned{{r: r, c: r.c, p: p, journal: true}}, 0
		}
		ws, rest, err := s.batchOf(p)
		if err != nil {
			r.finish(err)
			return nil, 0
		}
		return []planned{{r: r, c: r.c, p: p, ws: ws, rest: rest}}, len(ws)
	}
	if s.opts.Fence {
		parts := s.endParts(r, p)
		return parts, len(parts)
	}
	if len(r.c.Finished) == 1 && len(p.writes) == 1 {
		return []planned{{r: r, c: r.c, p: p, ws: p.writes}}, 1
	}
	return finishParts(r, p), len(p.writes)
}

// finishParts returns the parts of r's change, which only finishes
// messages and is planned as p: one per message pending.
func finishParts(r *applyReq, p *plan) []planned {
	n := len(p.writes)
	parts, plans := make([]planned, n), make([]plan, n)
	for i := range p.writes {
		plans[i].writes = p.writes[i : i+1 : i+1]
		parts[i] = planned{r: r, msg: p.writes[i].msg, p: &plans[i], ws: plans[i].writes}
	}
	return parts
}

// busy reports whether a key that parts write is in keys, or written by a
// flight in the air, which it returns. Called with s.mu held.
func (s *Store) busy(keys map[string]bool, parts []planned) (bool, *flight) {
	for i := range parts {
		for _, w := range parts[i].ws {
			if keys[w.key] {
				return true, nil
			}
			if f := s.flying[w.key]; f != nil {
				return true, f
			}
			for _, e := range w.ends {
				if keys[e.Key] {
					return true, nil
				}
				if f := s.flying[e.Key]; f != nil {
					return true, f
				}
			}
		}
	}
	return false, nil
}

// launch sends round as a flight, each change its own write, and returns
// it. With the fence, the first message of each change expects the
// stream's last sequence that the changes sent before it leave. A change
// not sent whole (the connection failed) is settled with the flight, and
// no flight is sent until this one has settled. Called with s.mu held.
func (s *Store) launch(round []planned) *flight {
	s.flightNo++
	f := &flight{no: s.flightNo, round: round, done: make(chan struct{})}
	f.deadline = time.Now().Add(s.opts.Timeout)
	f.acks = make([]ack, len(round))
	n := 0
	for i := range round {
		n += len(round[i].ws)
	}
	f.keys = make([]string, 0, n)
	for _, pl := range round {
		pl.r.flight = f
		for _, w := range pl.ws {
			f.keys = append(f.keys, w.key)
			s.flying[w.key] = f
			for _, e := range w.ends {
				f.keys = append(f.keys, e.Key)
				s.flying[e.Key] = f
			}
		}
	}
	s.flights = append(s.flights, f)
	if len(round) > 1 {
		s.round++
	}
	switch {
	case s.opts.Fence && s.isFenced():
		f.waitErr = fmt.Errorf("%w", ErrFenced)
		return f
	case s.replies == nil:
		s.inbox = s.nc.NewInbox()
		sub, err := s.nc.SubscribeSync(s.inbox + ".>")
		if err != nil {
			f.waitErr = fmt.Errorf("natsstore: subscribing to the server's answers: %w", err)
			return f
		}
		s.replies = sub
	}
	if len(s.flights) == 1 {
		s.sent = s.last // what was written on its own since (publish) counts
	}
	prefix := s.inbox + "." + strconv.FormatUint(f.no, 10) + "."
	last := s.sent
	m := &s.scratch // the client copies a message out as it publishes it
	if m.Header == nil {
		m.Header = make(nats.Header, 4)
	}
send:
	for i, pl := range round {
		id := ""
		if len(pl.ws) > 1 {
			id = newID()
		}
		for j := range pl.ws {
			s.message(m, pl.ws, j, id, s.opts.Fence, s.opts.Fence, last)
			if j == len(pl.ws)-1 {
				m.Reply = prefix + strconv.Itoa(i)
			}
			if s.nc.PublishMsg(m) != nil {
				s.draining = true
				break send
			}
		}
		f.sent++
		last += uint64(len(pl.ws))
	}
	s.sent = last
	return f
}

// settleOldest waits for the answers to the oldest flight in the air, then
// settles it. It holds the settler's role meanwhile. Called with s.mu held
// and the role free; releases s.mu while it waits.
func (s *Store) settleOldest() {
	f := s.flights[0]
	s.settling = true
	s.mu.Unlock()
	s.collectAnswers(f)
	s.mu.Lock()
	s.settling = false
	s.settle(f)
}

// answerKey names an answer to a change: its flight and its place there.
type answerKey struct {
	flight uint64
	i      int
}

// collectAnswers reads the server's answers until f has every one to the
// changes it sent, or its context ends. Called by the holder of the
// settler's role, without s.mu.
func (s *Store) collectAnswers(f *flight) {
	for f.waitErr == nil && f.got < f.sent {
		s.readAnswer(f)
	}
}

// readAnswer takes for f the answers to it kept aside, or else reads the
// next answer: f's, or a later flight's, which it keeps aside for it
// (s.early), or an earlier one's, given up on, which it drops. A wait that
// fails sets f.waitErr. Called by the holder of the settler's role.
func (s *Store) readAnswer(f *flight) {
	if len(s.early) > 0 {
		for i := range f.sent {
			if data, ok := s.early[answerKey{f.no, i}]; ok {
				delete(s.early, answerKey{f.no, i})
				f.answer(i, data)
			}
		}
		if f.got == f.sent {
			return
		}
	}
	wait := time.Until(f.deadline)
	if wait <= 0 {
		// Answers that came by the deadline still count, though the
		// settler was away (retrying changes, say) until after it.
		if n, _, err := s.replies.Pending(); err != nil || n == 0 {
			f.waitErr = fmt.Errorf("natsstore: committing a change: %w", context.DeadlineExceeded)
			return
		}
		wait = time.Millisecond // NextMsg returns a queued message at once
	}
	m, err := s.replies.NextMsg(wait)
	if errors.Is(err, nats.ErrTimeout) {
		err = context.DeadlineExceeded
	}
	if err != nil {
		f.waitErr = fmt.Errorf("natsstore: committing a change: %w", err)
		return
	}
	prefix := s.inbox + "."
	no, i, ok := strings.Cut(strings.TrimPrefix(m.Subject, prefix), ".")
	fno, err1 := strconv.ParseUint(no, 10, 64)
	idx, err2 := strconv.Atoi(i)
	switch {
	case !ok || err1 != nil || err2 != nil || !strings.HasPrefix(m.Subject, prefix) || fno < f.no:
		// An answer to a flight that gave up waiting for it.
	case fno > f.no:
		s.early[answerKey{fno, idx}] = m.Data
	case idx >= 0 && idx < f.sent && !f.acks[idx].answered:
		f.answer(idx, m.Data)
	}
}

// answer records data, the server's answer to f's change i.
func (f *flight) answer(i int, data []byte) {
	a := &f.acks[i]
	a.seq, a.err = readAck(data, len(f.round[i].ws))
	a.answered = true
	f.got++
}

// settle finishes each request of f, the oldest flight, by its answer:
// committed, refused, or of unknown outcome. With the fence, a change
// refused or not answered leaves those sent after it expecting a last
// sequence the stream has not: the flights after f are stale, and the
// changes not written are tried again one by one (see oneByOne), once the
// stale flights have been refused. Called with s.mu held.
func (s *Store) settle(f *flight) {
	s.flights[0] = nil
	s.flights = s.flights[1:]
	for _, k := range f.keys {
		if s.flying[k] == f {
			delete(s.flying, k)
		}
	}
	broken := f.stale // the chain of expected sequences broke before f
	var later []planned
	for i, pl := range f.round {
		if i >= f.sent {
			later = append(later, pl) // not sent whole
			broken = true
			continue
		}
		err, seq := f.waitErr, f.acks[i].seq
		if f.acks[i].answered {
			err = f.acks[i].err
		}
		var rej *rejection
		switch {
		case err == nil && s.opts.Fence && broken:
			// Written, after a change sent before it that was not: its
			// expected last sequence was met by another store's writes,
			// which did not claim the bucket first.
			s.fence(errors.New("another store wrote to the bucket without claiming it"))
			s.committed(pl.p, pl.ws, seq)
			pl.r.finish(nil)
		case s.opts.Fence && broken:
			later = append(later, pl) // expected a last sequence the stream has not
		case err == nil:
			if s.opts.Fence {
				s.last = seq
			}
			s.committed(pl.p, pl.ws, seq)
			s.garbage = append(s.garbage, pl.rest...)
			pl.r.finish(nil)
		case errors.As(err, &rej):
			later = append(later, pl)
			broken = true
		case s.opts.Fence:
			// No answer, or one that does not parse: it may or may not
			// have been stored, and this store cannot tell its own
			// writes from another's.
			err = s.fence(err)
			pl.r.finish(err)
			later = append(later, pl)
			broken = true
		default:
			// It may or may not have been stored: forget what this
			// Store knows, so that the next call reads the bucket again.
			s.indexed = false
			pl.r.finish(err)
		}
	}
	if broken && s.opts.Fence && len(s.flights) > 0 {
		for _, g := range s.flights {
			g.stale = true
		}
		s.draining = true
	}
	// The stale flights' messages went out before anything oneByOne
	// sends: the server has refused them first.
	s.oneByOne(later, len(f.round))
	if len(s.garbage) > 0 {
		if !s.opts.Fence || len(s.flights) == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
			s.collect(ctx, s.garbage)
			cancel()
			s.garbage = nil
		} else {
			s.draining = true // collected once no flight is in the air
		}
	}
	if len(s.flights) == 0 {
		s.draining = false
	}
	f.settled = true
	close(f.done)
}

// commitQueue writes every change queued, in rounds of one atomic batch,
// and finishes its request: the way of a store on a bucket of several
// replicas. Called with s.mu held.
func (s *Store) commitQueue() {
	s.qmu.Lock()
	reqs := s.queue
	s.queue = nil
	s.qmu.Unlock()
	for len(reqs) > 0 {
		round, n, _, _ := s.gather(reqs)
		if len(round) > 0 {
			s.commitBatch(round)
		}
		reqs = reqs[n:]
	}
}

// oneByOne writes the changes of a flight or round of n that it did not
// write, one at a time (applyOne), which tells a refused change from a
// deposed store and learns what it must. A request written in parts keeps
// the error of a part that failed. Called with s.mu held.
func (s *Store) oneByOne(later []planned, n int) {
	if len(later) > 0 {
		s.log.Debug("natsstore: changes sent together were refused; writing them one by one", "bucket", s.opts.Bucket, "changes", len(later), "of", n)
	}
	for _, pl := range later {
		if !pl.r.done || pl.r.err == nil {
			s.applyOneFor(pl.r, pl.change(), nil)
		}
	}
}

// commitBatch writes round, on a replicated stream, as one atomic batch,
// which the server stores whole or not at all, and finishes each request.
// The batch is one change's write as publish makes it: with the fence,
// its first message expects the stream's last sequence to be this store's
// last write. A batch refused is written change by change (oneByOne).
// Called with s.mu held.
func (s *Store) commitBatch(round []planned) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(round[0].r.ctx), s.opts.Timeout)
	defer cancel()
	if s.opts.Fence && s.isFenced() {
		for _, pl := range round {
			pl.r.finish(fmt.Errorf("%w", ErrFenced))
		}
		return
	}
	if len(round) == 1 {
		// On the request's context, as a change on its own.
		s.applyOneFor(round[0].r, round[0].change(), round[0].p)
		return
	}
	s.round++
	var ws []write
	for _, pl := range round {
		ws = append(ws, pl.ws...)
	}
	last, err := s.publish(ctx, ws)
	var rej *rejection
	switch {
	case err == nil:
		end := last - uint64(len(ws))
		for _, pl := range round {
			end += uint64(len(pl.ws))
			s.committed(pl.p, pl.ws, end)
			pl.r.finish(nil)
		}
		for _, pl := range round {
			s.collect(ctx, pl.rest)
		}
	case errors.As(err, &rej) && !s.isFenced():
		s.oneByOne(round, len(round))
	default: // fenced, or of unknown outcome
		if !s.opts.Fence {
			s.indexed = false // read the bucket again before the next change
		}
		for _, pl := range round {
			pl.r.finish(err)
		}
	}
}

// onlyFinishes reports whether c does nothing but finish messages, which
// the store may record one by one (see [store.Store]).
func onlyFinishes(c *store.Change) bool {
	// As Empty counts, less Finished: a copy of c would grow the frame
	// of its caller, which runs deep in a drainer's stack.
	return len(c.Finished) > 0 && len(c.Roles)+len(c.Agents)+len(c.Contacts)+len(c.Requests)+len(c.Accepted)+len(c.Histories)+len(c.States)+len(c.HistoryAppends) == 0 &&
		c.Remove.Empty()
}
