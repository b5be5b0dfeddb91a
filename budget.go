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
// together: input and output tokens and model calls. A zero field is
// unlimited; a negative one is refused.
//
// A model call is charged before it is made (one call, and the tokens of
// its request as the model will likely count them) and settled after it
// with the usage the model reported, so that calls made at once cannot
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
}

// Usage is what a task has spent on the model, with its budget.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	ModelCalls   int64 `json:"model_calls"`
	Budget       Budget
}

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
	if bad != nil {
		return &Error{Code: ErrInvalidArgument, Message: "a budget cannot be negative: " + strings.Join(bad, ", "), MissingFields: bad}
	}
	return nil
}

// ledger is a task's budget and spending. Guarded by s.mu.
type ledger struct {
	budget   Budget
	spent    Usage // Budget unused
	reserved Usage // charged for calls in flight, not yet settled
	told     bool  // user was told the budget ran out (since the society opened)
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
	return strings.Join(out, ", ")
}

// The store keeps a task's ledger as a state entry under this scope.
const (
	budgetScope = "budget:"
	budgetKey   = "ledger"
)

// ledgerRecord is a ledger as the store keeps it.
type ledgerRecord struct {
	Budget Budget `json:"budget"`
	Spent  Usage  `json:"spent"`
}

func (s *Society) ledgerEntry(task string, l *ledger) store.StateEntry {
	v, _ := json.Marshal(ledgerRecord{Budget: l.budget, Spent: Usage{InputTokens: l.spent.InputTokens, OutputTokens: l.spent.OutputTokens, ModelCalls: l.spent.ModelCalls}})
	return store.StateEntry{Scope: budgetScope + task, Key: budgetKey, Value: v, Writer: RootID, UpdatedAt: time.Now()}
}

// restoreLedger takes back a ledger the store kept, reporting whether e is
// one. Called with s.mu held, while the society opens.
func (s *Society) restoreLedger(e store.StateEntry) bool {
	task, ok := strings.CutPrefix(e.Scope, budgetScope)
	if !ok || e.Key != budgetKey {
		return false
	}
	var r ledgerRecord
	if json.Unmarshal(e.Value, &r) == nil {
		s.ledgers[task] = &ledger{budget: r.Budget, spent: r.Spent}
	}
	return true
}

// ledgerOf returns task's ledger, starting one with the default budget.
// Called with s.mu held.
func (s *Society) ledgerOf(task string) *ledger {
	l := s.ledgers[task]
	if l == nil {
		l = &ledger{budget: s.cfg.TaskBudget}
		s.ledgers[task] = l
	}
	return l
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

// charge reserves a model call for task before it is made, or refuses it
// with ErrBudgetExhausted if the task's budget ran out; release settles it.
func (s *Society) charge(task string, req *llm.Request) (release func(*llm.Response), err *Error) {
	if task == "" {
		return func(*llm.Response) {}, nil
	}
	estimate := estimateTokens(req)
	s.mu.Lock()
	l := s.ledgerOf(task)
	if what := l.exhausted(); what != "" {
		tell := !l.told
		l.told = true
		spent := l.spent
		budget := l.budget
		s.mu.Unlock()
		if tell {
			s.tellExhausted(task, what, spent, budget)
		}
		return nil, &Error{Code: ErrBudgetExhausted, Message: "the task's budget ran out (" + what + "): no more model calls"}
	}
	l.reserved.ModelCalls++
	l.reserved.InputTokens += estimate
	s.mu.Unlock()
	return func(resp *llm.Response) {
		in, out := estimate, int64(0)
		if resp != nil && resp.Usage.InputTokens > 0 {
			in = int64(resp.Usage.InputTokens)
		}
		if resp != nil {
			out = int64(resp.Usage.OutputTokens)
		}
		unreserve := func() {
			l.reserved.ModelCalls--
			l.reserved.InputTokens -= estimate
		}
		s.mu.Lock()
		limited := l.budget != Budget{}
		if !limited { // nothing to enforce, so nothing to record
			l.spent.ModelCalls++
			l.spent.InputTokens += in
			l.spent.OutputTokens += out
			unreserve()
		}
		s.mu.Unlock()
		if !limited {
			return
		}
		// Recorded and committed as one change on the ledger's key, so
		// that the store keeps the spending in the order it grew; the
		// reservation holds until the spending replaces it.
		err := s.apply(s.runCtx, func() (*change, *Error) {
			next := *l
			next.spent.ModelCalls++
			next.spent.InputTokens += in
			next.spent.OutputTokens += out
			return &change{
				claims: []string{claimState(budgetScope+task, budgetKey)},
				record: store.Change{States: []store.StateEntry{s.ledgerEntry(task, &next)}},
				commit: func() { l.spent = next.spent; unreserve() },
			}, nil
		})
		if err != nil {
			s.mu.Lock()
			unreserve()
			s.mu.Unlock()
		}
		if err != nil && !errors.Is(err, ErrClosed) {
			s.log.LogAttrs(s.runCtx, slog.LevelError, "recording a task's spending failed", slog.String("task", task), slog.String("err", err.Error()))
		}
	}, nil
}

// tellExhausted tells user, once, that task's budget ran out.
func (s *Society) tellExhausted(task, what string, spent Usage, budget Budget) {
	ctx := s.runCtx
	s.mu.Lock()
	root := &Actor{s: s, a: s.agents[RootID], taskID: task}
	s.mu.Unlock()
	text := "task " + task + " ran out of its budget (" + what + "); its agents make no more model calls. Spent: " +
		itoa(int(spent.ModelCalls)) + " model calls, " + itoa(int(spent.InputTokens)) + " input tokens, " + itoa(int(spent.OutputTokens)) +
		" output tokens. Raise the budget with SetBudget and send the lead a message to go on."
	s.log.LogAttrs(ctx, slog.LevelWarn, "task budget exhausted", slog.String("task", task), slog.String("what", what))
	if _, err := s.sendOwn(ctx, root, Outgoing{To: UserID, Type: StatusReport, Payload: StatusReportPayload{Status: StatusBudgetExhausted, Text: text}}); err != nil && !errors.Is(err, ErrClosed) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "telling the user of an exhausted budget failed", slog.String("task", task), slog.String("err", err.Error()))
	}
}

// Usage returns what task has spent on the model, and its budget. ok is
// false for a task that has made no model call and has no budget of its
// own.
func (s *Society) Usage(taskID string) (u Usage, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.ledgers[taskID]
	if l == nil {
		return Usage{Budget: s.cfg.TaskBudget}, false
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
		next := *l
		next.budget, next.told = b, false
		return &change{
			claims: []string{claimState(budgetScope+taskID, budgetKey)},
			record: store.Change{States: []store.StateEntry{s.ledgerEntry(taskID, &next)}},
			commit: func() { l.budget, l.told = b, false },
		}, nil
	}); err != nil {
		return s.refuse("set_budget", UserID, err)
	}
	return nil
}
