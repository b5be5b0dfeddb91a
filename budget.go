package agentsociety

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"agentsociety/llm"
	"agentsociety/store"
)

// Budget bounds what a task may spend on the model, all its agents
// together, or what an agent and its descendants may, when its parent gave
// it a share (SpawnSpec.Budget): input and output tokens and model calls.
// A zero field is unlimited; a negative one is refused. A call is charged
// to the task and to every ancestor with a share of its own, so a share
// bounds a subtree and the task's budget bounds the whole.
//
// A model call is charged before it is made (one call, and the tokens of
// its request as the model will likely count them) and settled after it
// with the usage the model reported (a call that failed is not charged), so that calls made at once cannot
// overshoot a budget together by more than one call's worth each. When a
// task's budget runs out, its agents make no more model calls: each turn
// that needs one ends with ErrBudgetExhausted, and user is told once, by
// root, with a status_report of status "budget_exhausted" saying what ran
// out and what was spent. Society.SetBudget raises a budget; the agents go
// on with the next message they are sent.
//
// A limited budget and its spending are recorded in the store, with each
// call, and survive a restart; a task without one is only counted in
// memory, for Society.Usage.
type Budget struct {
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	ModelCalls   int64 `json:"model_calls,omitempty"`
	// Spawns bounds the agents spawned: a spawn beyond it is refused with
	// ErrBudgetExhausted.
	Spawns int64 `json:"spawns,omitempty"`
	// Deadline, if not zero, is when the budget runs out, whatever is
	// left of the rest: no model call is made after it.
	Deadline time.Time `json:"deadline,omitzero"`
}

// Usage is what a task has spent on the model, with its budget.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	ModelCalls   int64 `json:"model_calls"`
	Spawns       int64 `json:"spawns"`
	Budget       Budget
}

// errTold marks a refusal of a model call whose budget's running out was
// reported already: the failed turn needs no report of its own.
var errTold = errors.New("the budget's running out was reported")

// StatusBudgetExhausted is the status of the report that tells user a
// task's budget ran out.
const StatusBudgetExhausted = "budget_exhausted"

// check refuses a budget with a negative field.
func (b Budget) check() *Error {
	var bad []string
	if b.InputTokens < 0 {
		bad = append(bad, "InputTokens")
	}
	if b.OutputTokens < 0 {
		bad = append(bad, "OutputTokens")
	}
	if b.ModelCalls < 0 {
		bad = append(bad, "ModelCalls")
	}
	if b.Spawns < 0 {
		bad = append(bad, "Spawns")
	}
	if bad != nil {
		return &Error{Code: ErrInvalidArgument, Message: "a budget cannot be negative: " + strings.Join(bad, ", "), MissingFields: bad}
	}
	return nil
}

// ledger is the budget and spending of a task, or of an agent given a
// budget of its own (a share of its parent's). Guarded by s.mu.
type ledger struct {
	key      string // "task:<id>" or "agent:<id>"
	budget   Budget
	spent    Usage // Budget unused
	reserved Usage // charged for calls in flight, not yet settled
	told     bool  // the budget's running out was reported (since the society opened)
}

// exhausted names what of l's budget ran out, counting what is reserved,
// or "".
func (l *ledger) exhausted() string {
	b := l.budget
	var out []string
	if b.ModelCalls > 0 && l.spent.ModelCalls+l.reserved.ModelCalls >= b.ModelCalls {
		out = append(out, "model calls")
	}
	if b.InputTokens > 0 && l.spent.InputTokens+l.reserved.InputTokens >= b.InputTokens {
		out = append(out, "input tokens")
	}
	if b.OutputTokens > 0 && l.spent.OutputTokens >= b.OutputTokens {
		out = append(out, "output tokens")
	}
	if !b.Deadline.IsZero() && !time.Now().Before(b.Deadline) {
		out = append(out, "deadline")
	}
	return strings.Join(out, ", ")
}

// left is what remains of l's budget, a field per limited one (-1 for an
// unlimited one), and its deadline.
func (l *ledger) left() Budget {
	rem := func(limit, used int64) int64 {
		if limit == 0 {
			return -1
		}
		return max(limit-used, 0)
	}
	return Budget{
		InputTokens:  rem(l.budget.InputTokens, l.spent.InputTokens+l.reserved.InputTokens),
		OutputTokens: rem(l.budget.OutputTokens, l.spent.OutputTokens),
		ModelCalls:   rem(l.budget.ModelCalls, l.spent.ModelCalls+l.reserved.ModelCalls),
		Spawns:       rem(l.budget.Spawns, l.spent.Spawns),
		Deadline:     l.budget.Deadline,
	}
}

// The store keeps a ledger as a state entry under this scope prefix and
// its key.
const (
	budgetScope = "budget:"
	budgetKey   = "ledger"
)

// ledgerRecord is a ledger as the store keeps it.
type ledgerRecord struct {
	Budget Budget `json:"budget"`
	Spent  Usage  `json:"spent"`
}

func ledgerEntry(key string, budget Budget, spent Usage) store.StateEntry {
	v, _ := json.Marshal(ledgerRecord{Budget: budget, Spent: Usage{InputTokens: spent.InputTokens, OutputTokens: spent.OutputTokens, ModelCalls: spent.ModelCalls, Spawns: spent.Spawns}})
	return store.StateEntry{Scope: budgetScope + key, Key: budgetKey, Value: v, Writer: RootID, UpdatedAt: time.Now()}
}

// restoreLedger takes back a ledger the store kept, reporting whether e is
// one. Called with s.mu held, while the society opens.
func (s *Society) restoreLedger(e store.StateEntry) bool {
	key, ok := strings.CutPrefix(e.Scope, budgetScope)
	if !ok || e.Key != budgetKey {
		return false
	}
	var r ledgerRecord
	if json.Unmarshal(e.Value, &r) == nil {
		s.ledgers[key] = &ledger{key: key, budget: r.Budget, spent: r.Spent}
	}
	return true
}

// ledgerOf returns task's ledger, starting one with the default budget.
// Called with s.mu held.
func (s *Society) ledgerOf(task string) *ledger {
	key := "task:" + task
	l := s.ledgers[key]
	if l == nil {
		l = &ledger{key: key, budget: s.cfg.TaskBudget}
		s.ledgers[key] = l
	}
	return l
}

// ledgersOf returns the ledgers a call by a on task is charged to: the
// task's, then a's own and each of its ancestors' that have one. Called
// with s.mu held.
func (s *Society) ledgersOf(a *agent, task string) []*ledger {
	var path []*ledger
	if task != "" { // a message outside any task is charged to no task
		path = append(path, s.ledgerOf(task))
	}
	for x := a; x != nil && x.info.ID != RootID; x = s.agents[x.info.ParentID] {
		if l := s.ledgers["agent:"+x.info.ID]; l != nil {
			path = append(path, l)
		}
	}
	return path
}

// remaining returns what a may still spend on task: for each field, the
// least that any of its ledgers has left (-1 when none limits it). Called
// with s.mu held.
func (s *Society) remaining(a *agent, task string) Budget {
	out := Budget{InputTokens: -1, OutputTokens: -1, ModelCalls: -1, Spawns: -1}
	least := func(cur, v int64) int64 {
		if v < 0 || (cur >= 0 && cur <= v) {
			return cur
		}
		return v
	}
	for _, l := range s.ledgersOf(a, task) {
		left := l.left()
		out.InputTokens = least(out.InputTokens, left.InputTokens)
		out.OutputTokens = least(out.OutputTokens, left.OutputTokens)
		out.ModelCalls = least(out.ModelCalls, left.ModelCalls)
		out.Spawns = least(out.Spawns, left.Spawns)
		if d := left.Deadline; !d.IsZero() && (out.Deadline.IsZero() || d.Before(out.Deadline)) {
			out.Deadline = d
		}
	}
	return out
}

// checkShare refuses a child's budget that is negative, or larger in a
// field than what its parent has left there. Called with s.mu held.
func (s *Society) checkShare(parent *agent, task string, b Budget) *Error {
	if err := b.check(); err != nil {
		return err
	}
	// A zero field is no limit of the child's own: it draws on the
	// parent's, which stays enforced; only a number above what is left is
	// refused.
	left := s.remaining(parent, task)
	var over []string
	if left.ModelCalls >= 0 && b.ModelCalls > left.ModelCalls {
		over = append(over, "model_calls")
	}
	if left.InputTokens >= 0 && b.InputTokens > left.InputTokens {
		over = append(over, "input_tokens")
	}
	if left.OutputTokens >= 0 && b.OutputTokens > left.OutputTokens {
		over = append(over, "output_tokens")
	}
	if left.Spawns >= 0 && b.Spawns > left.Spawns {
		over = append(over, "spawns")
	}
	if d := left.Deadline; !d.IsZero() && b.Deadline.After(d) {
		over = append(over, "deadline")
	}
	if len(over) == 0 {
		return nil
	}
	return &Error{Code: ErrBudgetTooLarge, MissingFields: over, Message: "the budget asks for more than you have left (" + strings.Join(over, ", ") +
		"); you have left: " + leftText(left) + ". Ask for less, or leave the field out to share yours."}
}

// leftText says what a Budget of remainders holds, for a model.
func leftText(left Budget) string {
	field := func(name string, v int64) string {
		if v < 0 {
			return name + " unlimited"
		}
		return name + " " + itoa(int(v))
	}
	out := field("model_calls", left.ModelCalls) + ", " + field("input_tokens", left.InputTokens) + ", " + field("output_tokens", left.OutputTokens) + ", " + field("spawns", left.Spawns)
	if !left.Deadline.IsZero() {
		out += ", deadline " + left.Deadline.UTC().Format(time.RFC3339)
	}
	return out
}

// estimateTokens is how many input tokens a request is likely to count,
// when the model does not say: a token for every three bytes, which does
// not undercount Chinese text as four would.
func estimateTokens(req *llm.Request) int64 {
	n := len(req.System)
	for _, m := range req.Messages {
		n += messageSize(m)
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return int64(n/3 + 1)
}

// charge reserves a model call by a on task, on every ledger it is charged
// to, before it is made, or refuses it with ErrBudgetExhausted if one of
// them ran out; settle settles it.
func (s *Society) charge(a *agent, task string, req *llm.Request) (settle func(*llm.Response), err *Error) {
	estimate := estimateTokens(req)
	s.mu.Lock()
	if s.closed.Load() { // a turn Close cut short makes no more calls
		s.mu.Unlock()
		return nil, errClosed()
	}
	path := s.ledgersOf(a, task)
	for _, l := range path {
		if what := l.exhausted(); what != "" {
			tell := !l.told
			l.told = true
			spent := l.spent
			s.mu.Unlock()
			if tell {
				s.tellExhausted(l.key, what, spent)
			}
			return nil, &Error{Code: ErrBudgetExhausted, Message: "the budget of " + l.key + " ran out (" + what + "): no more model calls", Err: errTold}
		}
	}
	for _, l := range path {
		l.reserved.ModelCalls++
		l.reserved.InputTokens += estimate
	}
	s.mu.Unlock()
	return func(resp *llm.Response) {
		if resp == nil { // the call failed: nothing to charge
			s.mu.Lock()
			for _, l := range path {
				l.reserved.ModelCalls--
				l.reserved.InputTokens -= estimate
			}
			s.mu.Unlock()
			return
		}
		in, out := estimate, int64(0)
		if resp != nil && resp.Usage.InputTokens > 0 {
			in = int64(resp.Usage.InputTokens)
		}
		if resp != nil {
			out = int64(resp.Usage.OutputTokens)
		}
		// Each ledger's reservation holds until its spending replaces it.
		spend := func(l *ledger) {
			l.reserved.ModelCalls--
			l.reserved.InputTokens -= estimate
			l.spent.ModelCalls++
			l.spent.InputTokens += in
			l.spent.OutputTokens += out
		}
		var limited []*ledger
		s.mu.Lock()
		for _, l := range path {
			if l.budget != (Budget{}) {
				limited = append(limited, l)
			} else {
				spend(l) // nothing to enforce, so nothing to record
			}
		}
		s.mu.Unlock()
		if len(limited) == 0 {
			return
		}
		// Recorded and committed as one change on the ledgers' keys, so
		// that the store keeps the spending in the order it grew.
		err := s.apply(s.runCtx, func() (*change, *Error) {
			c := &change{commit: func() {
				for _, l := range limited {
					spend(l)
				}
			}}
			for _, l := range limited {
				next := l.spent
				next.ModelCalls++
				next.InputTokens += in
				next.OutputTokens += out
				c.claims = append(c.claims, claimState(budgetScope+l.key, budgetKey))
				c.record.States = append(c.record.States, ledgerEntry(l.key, l.budget, next))
			}
			return c, nil
		})
		if err != nil {
			s.mu.Lock()
			for _, l := range limited {
				l.reserved.ModelCalls--
				l.reserved.InputTokens -= estimate
			}
			s.mu.Unlock()
			if !errors.Is(err, ErrClosed) {
				s.log.LogAttrs(s.runCtx, slog.LevelError, "recording spending failed", slog.String("task", task), slog.String("err", err.Error()))
			}
		}
	}, nil
}

// tellExhausted tells, once, that the budget of ledger key ran out: user
// for a task's; for an agent's, its parent (user, for a lead), from the
// agent.
func (s *Society) tellExhausted(key, what string, spent Usage) {
	ctx := s.runCtx
	kind, id, _ := strings.Cut(key, ":")
	s.mu.Lock()
	from, task, to := s.agents[RootID], id, UserID
	if kind == "agent" {
		if a := s.agents[id]; a != nil {
			from, task, to = a, a.info.TaskID, a.info.ParentID
			if to == RootID {
				to = UserID
			}
		}
	}
	s.mu.Unlock()
	if from == nil {
		return
	}
	subject := "task " + id
	if kind == "agent" {
		subject = id
	}
	text := subject + " ran out of its budget (" + what + ") and makes no more model calls. Spent: " +
		itoa(int(spent.ModelCalls)) + " model calls, " + itoa(int(spent.InputTokens)) + " input tokens, " + itoa(int(spent.OutputTokens)) + " output tokens."
	if kind == "task" {
		text += " Raise the budget with SetBudget and send the lead a message to go on."
	}
	s.log.LogAttrs(ctx, slog.LevelWarn, "budget exhausted", slog.String("budget", key), slog.String("what", what))
	s.emit(Event{Kind: EventBudgetExhausted, Task: task, Agent: from.info.ID, Name: key, Detail: what})
	if _, err := s.sendOwn(ctx, &Actor{s: s, a: from, taskID: task}, Outgoing{To: to, Type: StatusReport, Payload: StatusReportPayload{Status: StatusBudgetExhausted, Text: text}}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reporting an exhausted budget failed", slog.String("budget", key), slog.String("err", err.Error()))
	}
}

// Usage returns what task has spent on the model, and its budget. ok is
// false for a task that has made no model call and has no budget of its
// own.
func (s *Society) Usage(taskID string) (u Usage, ok bool) { return s.usage("task:" + taskID) }

// AgentUsage returns what agent id and its descendants have spent on the
// model since it was given a budget of its own (see SpawnSpec.Budget), and
// that budget. ok is false for an agent without one.
func (s *Society) AgentUsage(id string) (u Usage, ok bool) { return s.usage("agent:" + id) }

func (s *Society) usage(key string) (u Usage, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.ledgers[key]
	if l == nil {
		if strings.HasPrefix(key, "task:") {
			return Usage{Budget: s.cfg.TaskBudget}, false
		}
		return Usage{}, false
	}
	u = l.spent
	u.Budget = l.budget
	return u, true
}

// SetBudget sets task's budget, raising or lowering it; a task whose budget
// ran out and is raised makes model calls again from the next message its
// agents are sent. A negative field is refused with ErrInvalidArgument.
func (s *Society) SetBudget(ctx context.Context, taskID string, b Budget) error {
	if err := b.check(); err != nil {
		return s.refuse("set_budget", UserID, err)
	}
	if err := s.apply(ctx, func() (*change, *Error) {
		l := s.ledgerOf(taskID)
		return &change{
			claims: []string{claimState(budgetScope+l.key, budgetKey)},
			record: store.Change{States: []store.StateEntry{ledgerEntry(l.key, b, l.spent)}},
			commit: func() { l.budget, l.told = b, false },
		}, nil
	}); err != nil {
		return s.refuse("set_budget", UserID, err)
	}
	return nil
}

// budgetLine says, for a's system prompt, what a may still spend on its
// task, in the fields something limits; "" when nothing does. Called with
// s.mu held.
func (s *Society) budgetLine(a *agent) string {
	if a.info.TaskID == "" {
		return ""
	}
	left := s.remaining(a, a.info.TaskID)
	var out []string
	for _, f := range []struct {
		name string
		v    int64
	}{{"model_calls", left.ModelCalls}, {"input_tokens", left.InputTokens}, {"output_tokens", left.OutputTokens}, {"spawns", left.Spawns}} {
		if f.v >= 0 {
			out = append(out, f.name+" "+itoa(int(f.v)))
		}
	}
	if d := left.Deadline; !d.IsZero() {
		// In whole minutes, so that the prompt (and a provider's cache of
		// it) does not change with every second.
		out = append(out, "time_left "+max(time.Until(d), 0).Truncate(time.Minute).String())
	}
	return strings.Join(out, ", ")
}

// chargeSpawn checks that a spawn by parent on task is within the spawns
// of every ledger it is charged to, and adds to c, the spawn's change, its
// charge: recorded with the spawn, in order on each ledger's key. Called
// with s.mu held.
func (s *Society) chargeSpawn(c *change, parent *agent, task string) *Error {
	path := s.ledgersOf(parent, task)
	for _, l := range path {
		if b := l.budget.Spawns; b > 0 && l.spent.Spawns >= b {
			return &Error{Code: ErrBudgetExhausted, Message: "the budget of " + l.key + " allows " + itoa(int(b)) + " spawns, all used: do the work yourself, or give it to an agent you have"}
		}
	}
	for _, l := range path {
		if l.budget == (Budget{}) {
			continue // counted in memory only: nothing to enforce
		}
		next := l.spent
		next.Spawns++
		c.claims = append(c.claims, claimState(budgetScope+l.key, budgetKey))
		c.record.States = append(c.record.States, ledgerEntry(l.key, l.budget, next))
	}
	commit := c.commit
	c.commit = func() {
		commit()
		for _, l := range path {
			l.spent.Spawns++
		}
	}
	return nil
}
