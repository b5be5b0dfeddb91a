package agentsociety

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"log/slog"
)

// The loop guard watches conversations, not turns, and refuses, with
// ErrLoopDetected, a message that would carry on one of three patterns:
//
//   - ping-pong: two agents have answered each other LoopGuard.Rounds times
//     with no progress by either (no artifact stored, agent spawned, state
//     set or collaboration outcome);
//   - repeats: an agent sends a receiver the payload it sent it the last
//     LoopGuard.Repeats times, with no progress by either since;
//   - a delegation cycle: a collaboration_request to an agent that, through
//     requests still open, is already waiting on the requester.
//
// Progress is a completed collaboration outcome, not a rejection: two
// agents asking and refusing each other go in circles too. The refusal is
// a tool error the model can act on. If the sender goes on,
// its second refusal for the pattern tells the agents' parent (user, for a
// lead) with a status_report, once until the pattern is broken. Only
// model-driven agents' messages to agents are watched: not user's
// conversation, not code's, not the society's own, except that the
// society's report of an agent's failed turn, and the outcome of a request
// to it that timed out, count in a ping-pong as the agent's answer: a
// parent that answers each failure of its child with another "try again",
// or asks again each time it does not answer in time, loops with it too.

// LoopGuard configures the loop guard. The zero value is on, with the
// defaults.
type LoopGuard struct {
	// Off turns the guard off.
	Off bool
	// Rounds is how many times two agents may answer each other (a
	// message from one after a message from the other) with no progress
	// by either before the next answer is refused. Zero means
	// DefaultLoopRounds.
	Rounds int
	// Repeats is how many times in a row an agent may send one receiver
	// the same payload before the next is refused. Zero means
	// DefaultLoopRepeats.
	Repeats int
}

// The loop guard's defaults.
const (
	DefaultLoopRounds  = 8
	DefaultLoopRepeats = 3
)

// talk is what the loop guard follows of two agents' exchange, or of one
// agent's sends to one receiver. Guarded by s.mu.
type talk struct {
	n        int    // messages (repeats) or rounds (ping-pong) since the pattern last broke
	last     string // the sender of the pair's last message (ping-pong)
	epoch    uint64 // the pair's progress when n was last reset (ping-pong)
	hash     uint64 // the last payload (repeats)
	refused  int    // refusals since the pattern last broke
	reported bool   // the parent was told of this episode
}

// pairKey names two agents in either order.
type pairKey struct{ a, b string }

func pairOf(x, y string) pairKey {
	if x > y {
		x, y = y, x
	}
	return pairKey{x, y}
}

// loops is the loop guard's state. Guarded by s.mu.
type loops struct {
	seed     maphash.Seed
	pairs    map[pairKey]*talk // ping-pong, by the two agents
	repeats  map[pairKey]*talk // repeats, by sender and receiver (not sorted)
	progress map[string]uint64 // agent id -> progress events, for the agents that made any
}

func newLoops() loops {
	return loops{seed: maphash.MakeSeed(), pairs: map[pairKey]*talk{}, repeats: map[pairKey]*talk{}, progress: map[string]uint64{}}
}

// progressed records that agent id made progress: its exchanges start
// afresh. Called with s.mu held.
func (s *Society) progressed(id string) { s.loops.progress[id]++ }

// pairEpoch is the progress of two agents together.
func (l *loops) pairEpoch(k pairKey) uint64 { return l.progress[k.a] + l.progress[k.b] }

// guarded reports whether the loop guard watches p's message: one a
// model-driven agent sends another agent. Code does what it says, and
// the society's own messages and user's conversation are not loops.
func (s *Society) guarded(p *pendingSend) bool {
	return !s.cfg.LoopGuard.Off && !p.own && p.from != nil && p.msg.To != UserID && s.modelDriven(p.from)
}

// checkLoop refuses p's message if it would carry on a loop. It reads the
// guard's state only; commitLoop updates it. Called with s.mu held.
func (s *Society) checkLoop(p *pendingSend, f fields) *Error {
	if !s.guarded(p) {
		return nil
	}
	m, l := p.msg, &s.loops
	if m.Type == CollaborationResponse {
		return nil // an outcome is progress
	}
	if m.Type == CollaborationRequest {
		if path := s.requestPath(m.To, m.From); path != nil {
			return loopError(m.To, "delegation cycle: "+joinPath(append([]string{m.From}, path...))+
				". Do not ask an agent that is waiting on you; do the work yourself or answer the request you were given.")
		}
	}
	if t := l.repeats[pairKey{m.From, m.To}]; t != nil && t.hash == l.hash(m) && t.epoch == l.pairEpoch(pairOf(m.From, m.To)) && t.n >= s.cfg.LoopGuard.Repeats {
		return loopError(m.To, "you sent "+m.To+" this same message "+itoa(t.n)+" times in a row. Do not send it again: wait for an answer, or report what blocks you to your parent.")
	}
	k := pairOf(m.From, m.To)
	if t := l.pairs[k]; t != nil && t.epoch == l.pairEpoch(k) && t.last == m.To && t.n >= s.cfg.LoopGuard.Rounds {
		return loopError(m.To, "you and "+m.To+" have answered each other "+itoa(t.n)+" times with no progress (no artifact, spawn, state change or collaboration outcome). Stop messaging each other: finish your task with what you have, or report to your parent.")
	}
	return nil
}

func loopError(agentID, msg string) *Error {
	return &Error{Code: ErrLoopDetected, Message: msg, AgentID: agentID}
}

// commitLoop counts p's accepted message in the loop guard. Called with
// s.mu held.
func (s *Society) commitLoop(p *pendingSend) {
	m, l := p.msg, &s.loops
	if m.Type == CollaborationResponse && p.status == StatusCompleted {
		s.progressed(m.From) // an outcome: the work moved on
		s.progressed(m.To)
		return
	}
	if s.answerFor(p) {
		s.countRound(m)
		return
	}
	if !s.guarded(p) {
		return
	}
	h := l.hash(m)
	rk := pairKey{m.From, m.To}
	r := l.repeats[rk]
	if r == nil {
		r = &talk{}
		l.repeats[rk] = r
	}
	if e := l.pairEpoch(pairOf(m.From, m.To)); r.hash != h || r.epoch != e {
		*r = talk{hash: h, epoch: e}
	}
	r.n++
	s.countRound(m)
}

// countRound counts m in the ping-pong of its sender and receiver: an
// answer, when the receiver sent the pair's last message. Called with s.mu
// held.
func (s *Society) countRound(m *Message) {
	l := &s.loops
	k := pairOf(m.From, m.To)
	t := l.pairs[k]
	if t == nil {
		t = &talk{}
		l.pairs[k] = t
	}
	if e := l.pairEpoch(k); t.epoch != e {
		*t = talk{epoch: e}
	}
	if t.last != "" && t.last != m.From {
		t.n++ // an answer
	}
	t.last = m.From
}

// answerFor reports whether p is a message the society sends on an
// agent's behalf that stands, in a ping-pong, for the agent's answer: the
// report of its failed turn, or the outcome of a request to it that timed
// out. A parent that answers each failure with "try again", or asks again
// each time the helper does not answer in time, loops with it however it
// words what it sends. Called with s.mu held.
func (s *Society) answerFor(p *pendingSend) bool {
	m := p.msg
	if s.cfg.LoopGuard.Off || m.To == UserID || s.agents[m.From] == nil {
		return false
	}
	switch {
	case p.own:
		return reportStatus(m) == string(StatusError) // the report of a failed turn (see reportFailure)
	case p.from == nil: // settled by the society (see settle)
		return m.Type == CollaborationResponse && p.status == StatusTimeout
	}
	return false
}

// hash sums what m says: its type and payload, a collaboration request's
// without the request_id the society gives each one.
func (l *loops) hash(m *Message) uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(string(m.Type))
	payload := []byte(m.Payload)
	if m.Type == CollaborationRequest {
		var f fields
		if json.Unmarshal(payload, &f) == nil {
			delete(f, "request_id")
			payload = f.encode() // json.Marshal sorts the keys
		}
	}
	h.Write(payload)
	return h.Sum64()
}

// requestPath returns the agents from, through open requests, to to: from
// asked the first, which asked the next, ... which asked to; nil when there
// is no such chain. Called with s.mu held.
func (s *Society) requestPath(from, to string) []string {
	asks := map[string][]string{}
	for _, r := range s.requests {
		if r.status == StatusPending {
			asks[r.from] = append(asks[r.from], r.to)
		}
	}
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, y := range asks[x] {
			if _, seen := prev[y]; seen {
				continue
			}
			prev[y] = x
			if y == to {
				var path []string
				for z := y; z != ""; z = prev[z] {
					path = append([]string{z}, path...)
				}
				return path
			}
			queue = append(queue, y)
		}
	}
	return nil
}

func joinPath(ids []string) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += " → "
		}
		out += id
	}
	return out
}

// loopRefused counts a refusal of x's message to to by the loop guard and,
// at the second refusal of an episode, tells x's parent (user, for a lead)
// which agents loop and how.
func (s *Society) loopRefused(ctx context.Context, x *Actor, to string, e *Error) {
	s.emit(Event{Kind: EventLoopDetected, Task: x.taskID, Agent: x.a.info.ID, Turn: x.turn.id(), Target: to, Detail: e.Message})
	s.mu.Lock()
	k := pairOf(x.a.info.ID, to)
	t := s.loops.pairs[k]
	if t == nil {
		t = &talk{epoch: s.loops.pairEpoch(k)}
		s.loops.pairs[k] = t
	}
	t.refused++
	report := t.refused >= 2 && !t.reported
	if report {
		t.reported = true
	}
	parent := x.a.info.ParentID
	if parent == RootID || x.a.info.ID == RootID {
		parent = UserID
	}
	s.mu.Unlock()
	if !report || parent == "" {
		return
	}
	text := "loop_detected: " + x.a.info.ID + " keeps messaging " + to + ": " + e.Message
	s.log.LogAttrs(ctx, slog.LevelWarn, "loop detected", slog.String("agent", x.a.info.ID), slog.String("to", to), slog.String("detail", e.Message))
	if _, err := s.sendOwn(ctx, x, Outgoing{To: parent, Type: StatusReport, Payload: StatusReportPayload{Status: string(ErrLoopDetected), Text: text}}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reporting a loop failed", slog.String("agent", x.a.info.ID), slog.String("err", err.Error()))
	}
}

// forgetLoops forgets the loop guard's state of the agents gone. Called
// with s.mu held.
func (s *Society) forgetLoops(gone map[string]bool) {
	l := &s.loops
	for k := range l.pairs {
		if gone[k.a] || gone[k.b] {
			delete(l.pairs, k)
		}
	}
	for k := range l.repeats {
		if gone[k.a] || gone[k.b] {
			delete(l.repeats, k)
		}
	}
	for id := range gone {
		delete(l.progress, id)
	}
}
