package agentsociety

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strconv"
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
// out and what was spent. Society.SetBudget and Society.SetAgentBudget
// raise a budget; the agents it stopped go on by themselves.
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

// Usage is what a task, or an agent and its descendants, spent on the
// model, with its budget and what is left.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	ModelCalls   int64 `json:"model_calls"`
	Spawns       int64 `json:"spawns"`
	// Budget is the budget of its own: the task's, or the agent's share
	// (zero for an agent that draws on its parent's).
	Budget Budget
	// Left is what may still be spent, each field the least that any
	// budget it draws on has left (-1 when none limits it), and the
	// earliest deadline: for an agent without a share of its own, what
	// its nearest ancestor with one, or its task, has left.
	Left Budget
}

// counts is what a ledger counts: what was spent, or what is reserved for
// calls in flight.
type counts struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	ModelCalls   int64 `json:"model_calls"`
	Spawns       int64 `json:"spawns"`
}

func (c counts) usage() Usage {
	return Usage{InputTokens: c.InputTokens, OutputTokens: c.OutputTokens, ModelCalls: c.ModelCalls, Spawns: c.Spawns}
}

// errTold marks a refusal of a model call whose budget's running out was
// reported already: the failed turn needs no report of its own.
var errTold = errors.New("the budget's running out was reported")

// StatusBudgetExhausted is the status of the report that tells user a
// task's budget ran out.
const StatusBudgetExhausted = "budget_exhausted"

// check refuses a budget with a negative field.
func (b Budget) check() *Error {
	if bad := b.negative(); bad != nil {
		return &Error{Code: ErrInvalidArgument, Message: "a budget cannot be negative: " + strings.Join(bad, ", ")}
	}
	return nil
}

// negative returns the JSON names of b's negative fields, in their order.
func (b Budget) negative() []string {
	var bad []string
	for _, f := range []struct {
		name string
		v    int64
	}{{"input_tokens", b.InputTokens}, {"output_tokens", b.OutputTokens}, {"model_calls", b.ModelCalls}, {"spawns", b.Spawns}} {
		if f.v < 0 {
			bad = append(bad, f.name)
		}
	}
	return bad
}

// ledger is the budget and spending of a task, or of an agent and its
// descendants: a share of its parent's budget, or, with a zero budget,
// only what it spent, counted in memory. Guarded by s.mu.
type ledger struct {
	key      string // "task:<id>" or "agent:<id>"
	budget   Budget
	spent    counts
	reserved counts    // charged for calls in flight, not yet settled
	told     bool      // the budget's running out was reported (since the society opened)
	retiring bool      // a task's: queued to be forgotten, its task having ended (see prune.go)
	quiet    time.Time // a task's: when the task last went quiet (see idler); zero if it has not since the society opened
	// stopped are the agents whose model calls it refused since it was
	// last raised, in the order refused: a raise wakes them (see wake).
	stopped []halt
}

// recordLedger records l as it is, with the agents it stopped. Called
// with s.mu released.
func (s *Society) recordLedger(l *ledger) {
	if err := s.apply(s.runCtx, func() (*change, *Error) {
		return &change{
			claims: []string{claimState(budgetScope+l.key, budgetKey)},
			record: store.Change{States: []store.StateEntry{ledgerEntry(l.key, l.budget, l.spent, l.stopped)}},
		}, nil
	}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(s.runCtx, slog.LevelError, "recording the agents a budget stopped failed", slog.String("budget", l.key), slog.String("err", err.Error()))
	}
}

// halt is an agent whose model call a ledger refused, on a task.
type halt struct {
	Agent string `json:"agent"`
	Task  string `json:"task"`
}

// exhausted names what of l's budget ran out, counting what is reserved,
// or "": by the names the budget line of the prompt uses, in every
// language.
func (l *ledger) exhausted() string {
	b := l.budget
	var out []string
	if b.ModelCalls > 0 && l.spent.ModelCalls+l.reserved.ModelCalls >= b.ModelCalls {
		out = append(out, "model_calls")
	}
	if b.InputTokens > 0 && l.spent.InputTokens+l.reserved.InputTokens >= b.InputTokens {
		out = append(out, "input_tokens")
	}
	if b.OutputTokens > 0 && l.spent.OutputTokens >= b.OutputTokens {
		out = append(out, "output_tokens")
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
	Spent  counts `json:"spent"`
	// Stopped are the agents its running out stopped, woken when it is
	// raised, after a restart too.
	Stopped []halt `json:"stopped,omitempty"`
}

func ledgerEntry(key string, budget Budget, spent counts, stopped []halt) store.StateEntry {
	v, _ := json.Marshal(ledgerRecord{Budget: budget, Spent: spent, Stopped: stopped})
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
		s.ledgers[key] = &ledger{key: key, budget: r.Budget, spent: r.Spent, stopped: r.Stopped}
	}
	return true
}

// taskLedger returns task's ledger: the one the society keeps or, when it
// keeps none, a new one with the default budget that it does not keep
// (see keep). It changes nothing, so that a check may call it. Called
// with s.mu held.
func (s *Society) taskLedger(task string) *ledger {
	if l := s.ledgers["task:"+task]; l != nil { // found without making the key
		return l
	}
	return &ledger{key: "task:" + task, budget: s.cfg.TaskBudget}
}

// keep returns the ledger the society keeps under l's key, keeping l when
// it keeps none. Called with s.mu held, by a commit or by charge: never by
// a check.
func (s *Society) keep(l *ledger) *ledger {
	if k := s.ledgers[l.key]; k != nil {
		return k
	}
	s.ledgers[l.key] = l
	return l
}

// ledgersOf returns the ledgers a call by a on task is charged to: the
// task's, then a's own and each of its ancestors' that the society keeps.
// It keeps none that it does not (see taskLedger). Called with s.mu held.
func (s *Society) ledgersOf(a *agent, task string) []*ledger {
	// Room for a task, a child, its parent and a lead: one allocation.
	path := make([]*ledger, 0, 4)
	if task != "" { // a message outside any task is charged to no task
		path = append(path, s.taskLedger(task))
	}
	for x := a; x != nil && x.info.ID != RootID; x = s.agents[x.info.ParentID] {
		if l := s.ledgers["agent:"+x.info.ID]; l != nil {
			path = append(path, l)
		}
	}
	return path
}

// charged returns the ledgers a call or a spawn by a on task is charged
// to, as ledgersOf does, keeping one for the task and for a and each of
// its ancestors that had none, so that each agent's spending is counted
// (see Society.AgentUsage). Called with s.mu held, by a commit or by
// charge: never by a check.
func (s *Society) charged(a *agent, task string) []*ledger {
	// Room for a task, a child, its parent and a lead: one allocation.
	path := make([]*ledger, 0, 4)
	if task != "" {
		path = append(path, s.keep(s.taskLedger(task)))
	}
	for x := a; x != nil && x.info.ID != RootID && x.info.ID != UserID; x = s.agents[x.info.ParentID] {
		l := s.ledgers["agent:"+x.info.ID] // found without making the key
		if l == nil {
			l = s.keep(&ledger{key: "agent:" + x.info.ID})
		}
		path = append(path, l)
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

// checkShare refuses a child's budget that is negative, or that leaves the
// child more to spend in a field than its parent has left there: spent is
// what the child spent already (nothing, for a spawn). by is the parent's
// id when the host sets the share, "" when the parent asks. Called with
// s.mu held.
func (s *Society) checkShare(parent *agent, task string, b Budget, spent counts, by string) *Error {
	if err := b.check(); err != nil {
		return err
	}
	// A zero field is no limit of the child's own: it draws on the
	// parent's, which stays enforced; only a number above what is left is
	// refused.
	left := s.remaining(parent, task)
	var over []string
	for _, f := range []struct {
		name                string
		share, spent, avail int64
	}{
		{"model_calls", b.ModelCalls, spent.ModelCalls, left.ModelCalls},
		{"input_tokens", b.InputTokens, spent.InputTokens, left.InputTokens},
		{"output_tokens", b.OutputTokens, spent.OutputTokens, left.OutputTokens},
		{"spawns", b.Spawns, spent.Spawns, left.Spawns},
	} {
		if f.avail >= 0 && f.share-f.spent > f.avail {
			over = append(over, f.name)
		}
	}
	if d := left.Deadline; !d.IsZero() && b.Deadline.After(d) {
		over = append(over, "deadline")
	}
	if len(over) == 0 {
		return nil
	}
	if by != "" {
		return &Error{Code: ErrBudgetTooLarge, MissingFields: over, AgentID: by, Message: "the budget leaves more to spend than " + by + ", the parent, has left (" +
			strings.Join(over, ", ") + "); it has left: " + leftText(left)}
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
	if a.info.Status == StatusTerminated { // ended with an ancestor, mid-turn
		s.mu.Unlock()
		return nil, &Error{Code: ErrAgentTerminated, Message: a.info.ID + " was terminated: no more model calls", AgentID: a.info.ID}
	}
	path := s.charged(a, task)
	for _, l := range path {
		if what := l.exhausted(); what != "" {
			tell := !l.told
			l.told = true
			h := halt{a.info.ID, task}
			added := !slices.Contains(l.stopped, h)
			if added {
				l.stopped = append(l.stopped, h) // woken when l is raised
			}
			spent := l.spent
			s.mu.Unlock()
			if added && l.budget != (Budget{}) {
				s.recordLedger(l) // so that a raise after a restart wakes it too
			}
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
	release := func(l *ledger) {
		l.reserved.ModelCalls--
		l.reserved.InputTokens -= estimate
	}
	return func(resp *llm.Response) {
		if resp == nil { // the call failed: nothing to charge
			var woken []halt
			var changed []*ledger
			s.mu.Lock()
			for _, l := range path {
				release(l)
				// What the call reserved may have stopped others: they go
				// on, now that it is not spent.
				if len(l.stopped) > 0 && l.exhausted() == "" {
					woken = append(woken, l.stopped...)
					l.stopped, l.told = nil, false
					if l.budget != (Budget{}) {
						changed = append(changed, l)
					}
				}
			}
			s.mu.Unlock()
			for _, l := range changed {
				s.recordLedger(l) // so that a raise after a restart does not wake them again
			}
			s.wake(s.runCtx, woken)
			return
		}
		// A usage the model reports below zero is taken as none: it must
		// not give back what was spent.
		in, out := estimate, max(int64(resp.Usage.OutputTokens), 0)
		if resp.Usage.InputTokens > 0 {
			in = int64(resp.Usage.InputTokens)
		}
		add := func(c counts) counts {
			c.ModelCalls++
			c.InputTokens = addTokens(c.InputTokens, in)
			c.OutputTokens = addTokens(c.OutputTokens, out)
			return c
		}
		// Each ledger's reservation holds until its spending replaces it.
		spend := func(l *ledger) {
			release(l)
			l.spent = add(l.spent)
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
		err := s.applyClosing(s.runCtx, func() (*change, *Error) {
			c := &change{commit: func() {
				for _, l := range limited {
					spend(l)
				}
			}}
			for _, l := range limited {
				c.claims = append(c.claims, claimState(budgetScope+l.key, budgetKey))
				c.record.States = append(c.record.States, ledgerEntry(l.key, l.budget, add(l.spent), l.stopped))
			}
			return c, nil
		})
		if err != nil {
			s.mu.Lock()
			for _, l := range limited {
				release(l)
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
func (s *Society) tellExhausted(key, what string, spent counts) {
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
	tmpl, subject := s.lang.Strings.BudgetTask, "task"
	if kind == "agent" {
		tmpl, subject = s.lang.Strings.BudgetAgent, "id"
	}
	text := expand(tmpl, subject, id, "what", what,
		"calls", itoa(int(spent.ModelCalls)), "input", itoa(int(spent.InputTokens)), "output", itoa(int(spent.OutputTokens)))
	s.log.LogAttrs(ctx, slog.LevelWarn, "budget exhausted", slog.String("budget", key), slog.String("what", what))
	s.emit(Event{Kind: EventBudgetExhausted, Task: task, Agent: from.info.ID, Name: key, Detail: what})
	if _, err := s.sendOwn(ctx, &Actor{s: s, a: from, taskID: task}, Outgoing{To: to, Type: StatusReport, Payload: StatusReportPayload{Status: StatusBudgetExhausted, Text: text}}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reporting an exhausted budget failed", slog.String("budget", key), slog.String("err", err.Error()))
	}
}

// Usage returns what task has spent on the model, its budget and what is
// left. ok is false for a task that has made no model call or spawn and
// has no budget of its own.
func (s *Society) Usage(taskID string) (u Usage, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.taskLedger(taskID)
	u = l.spent.usage()
	u.Budget, u.Left = l.budget, l.left()
	return u, s.ledgers[l.key] == l
}

// AgentUsage returns what agent id and its descendants have spent on the
// model and in spawns, its budget and what it may still spend. Its budget
// is its share, if it was given one (see SpawnSpec.Budget and
// SetAgentBudget), and zero if it draws on its parent's; Left is what the
// budgets it draws on have left, its own and its ancestors' and its
// task's. An agent with a share has its spending counted from when it got
// it, and recorded in the store; one without counts it in memory, from
// when the society opened. ok is false for root, user and an agent the
// society does not have.
func (s *Society) AgentUsage(id string) (u Usage, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.agents[id]
	if a == nil || id == RootID || id == UserID {
		return Usage{}, false
	}
	if l := s.ledgers["agent:"+id]; l != nil {
		u = l.spent.usage()
		u.Budget = l.budget
	}
	u.Left = s.remaining(a, a.info.TaskID)
	return u, true
}

// SetBudget sets task's budget, raising or lowering it. A negative field
// is refused with ErrInvalidArgument. When the budget had run out and the
// new one has not, the agents whose model calls it refused go on by
// themselves: each is sent a short note from its parent (from user, for
// root) saying that the budget was raised, and takes up its work where it
// stopped. A task is forgotten, its budget with it, once it has had no
// agent and no work for Config.Retention: set the budget of a task to
// come shortly before its first message, or with [WithBudget].
func (s *Society) SetBudget(ctx context.Context, taskID string, b Budget) error {
	return s.setBudget(ctx, "task:"+taskID, b, nil)
}

// SetAgentBudget sets agent id's share of its parent's budget, raising or
// lowering it, or gives it one when it had none, as SpawnSpec.Budget does
// at a spawn: id and its descendants may spend no more than b, counting
// what they spent already. A share that leaves id more to spend in a field
// than its parent has left there (or a later deadline) is refused with
// ErrBudgetTooLarge, naming the fields; a negative field with
// ErrInvalidArgument; root, user and an agent that ended with ErrForbidden
// or ErrAgentNotFound. Agents stopped by the share's running out go on as
// with SetBudget.
func (s *Society) SetAgentBudget(ctx context.Context, id string, b Budget) error {
	return s.setBudget(ctx, "agent:"+id, b, func(spent counts) *Error {
		a := s.agents[id]
		switch {
		case id == RootID || id == UserID:
			return &Error{Code: ErrForbidden, Message: id + " has no budget of its own: set the task's with SetBudget", AgentID: id}
		case a == nil || a.info.Status == StatusTerminated:
			return &Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(id), AgentID: id}
		}
		parent := s.agents[a.info.ParentID]
		if parent == nil {
			return &Error{Code: ErrAgentNotFound, Message: id + "'s parent is gone", AgentID: id}
		}
		return s.checkShare(parent, a.info.TaskID, b, spent, parent.info.ID)
	})
}

// setBudget sets the budget of ledger key to b, after check, if given,
// passes it with what the ledger spent, and wakes the agents its running
// out stopped, if it is not run out any more.
func (s *Society) setBudget(ctx context.Context, key string, b Budget, check func(spent counts) *Error) error {
	if err := b.check(); err != nil {
		return s.refuse("set_budget", UserID, err)
	}
	var woken []halt
	if err := s.apply(ctx, func() (*change, *Error) {
		woken = nil
		var spent counts
		var stopped []halt
		if l := s.ledgers[key]; l != nil {
			spent = l.spent
			if (&ledger{budget: b, spent: spent, reserved: l.reserved}).exhausted() != "" {
				stopped = l.stopped // still stopped
			}
		}
		if check != nil {
			if e := check(spent); e != nil {
				return nil, e
			}
		}
		return &change{
			claims: []string{claimState(budgetScope+key, budgetKey)},
			record: store.Change{States: []store.StateEntry{ledgerEntry(key, b, spent, stopped)}},
			commit: func() {
				l := s.keep(&ledger{key: key})
				l.budget, l.told = b, false
				if l.exhausted() == "" {
					woken, l.stopped = l.stopped, nil
				}
				if task, ok := strings.CutPrefix(key, "task:"); ok && !s.hasAgents(task) {
					s.retireTask(task) // forgotten in time unless agents come (see prune.go)
				}
			},
		}, nil
	}); err != nil {
		return s.refuse("set_budget", UserID, err)
	}
	s.wake(ctx, woken)
	return nil
}

// wake sends each agent stopped by a budget that was raised a note that it
// was (Strings.BudgetRaised), on the task it stopped in, from its parent,
// or from user for root, so that it goes on with its work without anyone
// else writing to it. The note is a general message whose payload also
// carries "budget_raised": true, for Go behaviours.
func (s *Society) wake(ctx context.Context, stopped []halt) {
	payload := map[string]any{"text": s.lang.Strings.BudgetRaised, "budget_raised": true}
	for _, h := range stopped {
		id := h.Agent
		s.mu.Lock()
		a := s.agents[id]
		var from *agent
		if a != nil && a.info.Status == StatusActive {
			from = s.agents[a.info.ParentID]
			if id == RootID {
				from = s.user.self
			}
		}
		s.mu.Unlock()
		if from == nil {
			continue
		}
		if _, err := s.sendOwn(ctx, &Actor{s: s, a: from, taskID: h.Task}, Outgoing{To: id, Payload: payload}); err != nil && !errors.Is(err, ErrClosed) {
			s.log.LogAttrs(ctx, slog.LevelWarn, "waking an agent after a raise failed", slog.String("agent", id), slog.String("err", err.Error()))
		}
	}
}

// budgetLine says, for a's system prompt, what a may still spend on its
// task, in the fields something limits; "" when nothing does. Each figure
// is rounded down to its first digit, and the time left to the hour or to
// its first digit of minutes, marked "+" when rounding cut something (see
// coarse): the line, and with it the system prompt that a provider may
// cache, changes only when what is left falls to the next step, not with
// each call. Called with s.mu held.
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
			out = append(out, f.name+" "+coarse(f.v, "", false))
		}
	}
	if d := left.Deadline; !d.IsZero() {
		minutes := int64(max(time.Until(d), 0) / time.Minute)
		if minutes >= 60 {
			out = append(out, "time_left "+coarse(minutes/60, "h", minutes%60 != 0))
		} else {
			out = append(out, "time_left "+coarse(minutes, "m", false))
		}
	}
	return strings.Join(out, ", ")
}

// coarse writes v, with unit, rounded down to its first digit (7 stays 7;
// 4,321 is 4000+), so that it changes about nine times for each tenfold
// fall, not with every unit; "+" marks a figure that rounding cut, or
// whose smaller units were cut already (cut).
func coarse(v int64, unit string, cut bool) string {
	step := int64(1)
	for v/step >= 10 {
		step *= 10
	}
	out := strconv.FormatInt(v/step*step, 10) + unit
	if cut || v%step != 0 {
		out += "+"
	}
	return out
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
		c.record.States = append(c.record.States, ledgerEntry(l.key, l.budget, next, l.stopped))
	}
	commit := c.commit
	c.commit = func() {
		commit()
		for _, l := range s.charged(parent, task) {
			l.spent.Spawns++
		}
	}
	return nil
}

// addTokens returns a+n, n not below zero, or the largest int64 if the sum
// is past it: a model that reports an absurd usage must not wrap a count
// round to below zero, where no budget would ever run out.
func addTokens(a, n int64) int64 {
	if a > math.MaxInt64-n {
		return math.MaxInt64
	}
	return a + n
}
