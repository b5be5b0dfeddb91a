package agentsociety

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"agentsociety/internal/prompts"
	"agentsociety/llm"
)

// Summarizer folds the oldest turns of an agent's history into a summary
// when the history outgrows Config.HistoryBudget. It is given the previous
// summary ("" at first) and the messages being dropped, and returns the new
// summary, which the agent then sees in place of them. An error drops the
// turns without a summary.
type Summarizer func(ctx context.Context, agentID, previous string, dropped []llm.Message) (string, error)

// mind is a model-driven agent's memory: what it has been told and done.
// Only the agent's drainer touches it, one message at a time.
type mind struct {
	summary string
	msgs    []llm.Message

	// What the store holds, so that only what changed is recorded: the
	// history it holds is drop messages that msgs no longer has, then
	// msgs[:saved]; newSummary says whether summary changed since.
	saved      int
	drop       int
	newSummary bool

	// size is the content of msgs[:sized] in bytes, as trimHistory counts
	// it, so that a trim counts only what was added since the last.
	size, sized int

	// dropped counts the messages trimHistory dropped, for the marker
	// that says so; the store keeps the count with the history.
	dropped int
	// brief is the agent's first message, its task_assignment, as the
	// model reads it: pinned at the start of the history ("" for root).
	brief string
	// assigned is the brief a model's spawn gave the agent, decoded, until
	// its first turn shows it: the child need not decode its
	// task_assignment again.
	assigned *TaskBrief
	// view is the buffer of the messages view sends, reused call to call.
	view []llm.Message

	// system caches the system prompt: only the agent's contacts, its
	// children's reports and what it may still spend change it, so
	// systemShows, what of them it shows, says whether it is current.
	system      string
	systemShows promptState
}

// modelBehavior drives agents with the society's model.
type modelBehavior struct{ s *Society }

// HandleMessage runs one turn of the tool loop: the message joins the
// agent's history, then the model is called, and its tool calls run, until
// it answers without tool calls or the step limit is reached.
func (b modelBehavior) HandleMessage(ctx context.Context, self *Actor, m Message) error {
	s, a := b.s, self.a
	if a.mind == nil {
		a.mind = &mind{}
	}
	mem := a.mind
	assignment := m.Type == TaskAssignment && m.From == a.info.ParentID && mem.brief == "" && len(mem.msgs) == 0
	var content string
	if b := mem.assigned; b != nil && assignment {
		content = s.lang.frameMessage(m, s.roleNameOf(m.From), true, assignmentContent(b))
	} else {
		content = s.Format(m)
	}
	if a.info.ID == RootID && m.TaskID != "" {
		content += "\n" + s.taskLeadLine(m.TaskID)
	}
	mem.assigned = nil
	if assignment {
		mem.brief = content // the brief as view pins it
	}
	mem.msgs = append(mem.msgs, llm.Message{Role: llm.RoleUser, Content: content})
	tools := s.toolsFor(a.roleName())
	// A turn is mute when it ends in words and none of its calls told
	// anyone anything: the society watches for tasks that stall so (see
	// quiet.go).
	reached, words := false, ""
	defer func() { s.noteTurn(m.TaskID, a.info.ID, !reached && words != "", words) }()
	var failed repeatedFailures
	// unanswered are the calls of the last reply that have no result yet:
	// a tool that ends the turn's goroutine (runtime.Goexit) leaves them
	// so, and a history with a call and no result is one models refuse.
	// They are answered as failed, for the turn's history to be whole.
	var unanswered []llm.ToolCall
	defer func() {
		for _, call := range unanswered {
			failure := &Error{Code: ErrToolFailed, Message: "the tool " + call.Name + " failed"}
			mem.msgs = append(mem.msgs, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: encodeResult(nil, failure)})
		}
	}()
	for step := 0; step < s.cfg.MaxSteps; step++ {
		s.trimHistory(ctx, a.info.ID, mem)
		system, err := s.cachedSystemPrompt(a, mem)
		if err != nil {
			return err
		}
		view := s.view(a, mem)
		resp, err := s.generate(ctx, a, m.TaskID, m.ID, &llm.Request{Agent: a.info.ID, System: system, Messages: view, Tools: tools})
		if err != nil {
			return err
		}
		reply := resp.Message
		reply.Role = llm.RoleAssistant
		ensureCallIDs(reply.ToolCalls, view)
		mem.msgs = append(mem.msgs, reply)
		if reply.Content != "" {
			s.log.LogAttrs(ctx, slog.LevelInfo, "thought", slog.String("agent", a.info.ID), slog.String("text", reply.Content))
			if len(reply.ToolCalls) == 0 {
				s.emit(Event{Kind: EventThought, Task: m.TaskID, Agent: a.info.ID, Turn: m.ID, Detail: reply.Content})
			}
		}
		if resp.Truncated {
			// The reply stays in the history: it is what the model said.
			// Tool calls still run (one whose arguments were cut off fails
			// to decode and the model is told so), but a cut-off reply
			// without any is not taken for the end of the turn.
			cut := "at its output limit"
			if resp.Filtered {
				cut = "by the provider's content filter"
			}
			s.log.LogAttrs(ctx, slog.LevelWarn, "model reply truncated "+cut,
				slog.String("agent", a.info.ID), slog.Int("tool_calls", len(reply.ToolCalls)))
			if len(reply.ToolCalls) == 0 {
				return &Error{Code: ErrTruncated, Message: "the model's reply was cut off " + cut + " before it made a tool call", AgentID: a.info.ID}
			}
		}
		if len(reply.ToolCalls) == 0 {
			words = reply.Content
			return nil
		}
		// A reply whose calls all succeed, one of them with end_turn, ends
		// the turn: the model need not be called again only to stop.
		end, anyFailed := false, false
		var stuck *Error
		unanswered = reply.ToolCalls
		for _, call := range reply.ToolCalls {
			out, coded := s.runTool(ctx, self, call)
			ok := coded == nil
			s.log.LogAttrs(ctx, slog.LevelDebug, "tool call", slog.String("agent", a.info.ID), slog.String("tool", call.Name), slog.String("result", out))
			// A budget that ran out stops and reports by itself (see
			// budget.go), and a call Close refused is not the model's
			// doing (the turn ends with the next model call, to be handled
			// again); the others the model must see to.
			if !ok && coded.Code != ErrBudgetExhausted && coded.Code != ErrClosed {
				var err *Error
				if out, err = failed.note(call, out); err != nil && stuck == nil {
					err.AgentID = a.info.ID
					stuck = err
				}
			}
			mem.msgs = append(mem.msgs, llm.Message{Role: llm.RoleTool, ToolCallID: call.ID, Content: out})
			unanswered = unanswered[1:]
			end = end || endsTurn(call.Arguments)
			anyFailed = anyFailed || !ok
			reached = reached || ok && !reachesNobody(call.Name)
		}
		if stuck != nil {
			return stuck
		}
		if end && !anyFailed {
			return nil
		}
	}
	return &Error{Code: ErrStepLimit, Message: "the turn used " + itoa(s.cfg.MaxSteps) + " model calls without finishing", AgentID: a.info.ID}
}

// sameFailures is how many times a turn's model may make one call and
// have it fail the same way before the turn ends: a model that repeats a
// call that failed does not see what is wrong, and would spend every step
// of the turn on it.
const sameFailures = 3

// repeatedFailures counts the calls of a turn that failed, by the call
// (its tool and arguments) and the result.
type repeatedFailures map[string]int

// note counts call, which failed with result, and returns the result the
// model reads: the second time the same call fails the same way, with a
// note that says so; the third time, the turn ends, with the error it
// returns.
func (f *repeatedFailures) note(call llm.ToolCall, result string) (string, *Error) {
	if *f == nil {
		*f = make(repeatedFailures)
	}
	key := call.Name + "\x00" + string(bytes.TrimSpace(call.Arguments)) + "\x00" + result
	(*f)[key]++
	switch n := (*f)[key]; {
	case n >= sameFailures:
		return result, &Error{Code: ErrStepLimit, Message: "the turn was stopped: the model made the same call " + itoa(n) +
			" times, and it failed the same way each time: " + call.Name + " " + clip(string(call.Arguments), 200) + " gave " + clip(result, 300)}
	case n == sameFailures-1 && strings.HasSuffix(result, "}"):
		b, _ := json.Marshal("this same call failed the same way before in this turn, and will again: change what the error names, do something else, or end the turn; if it fails so once more, the turn ends")
		return result[:len(result)-1] + `,"repeated":` + string(b) + "}", nil
	}
	return result, nil
}

// ensureCallIDs gives each of calls that has no id, or one that a call of
// the conversation the model saw (view) or an earlier one of calls has,
// an id of its own, "call_<n>": the results are matched to the calls by id,
// here and by providers, which refuse a conversation whose ids repeat. The
// llm.Model contract asks the model for such ids; a host's model may not
// keep it. The ids made depend only on the view and the calls, so that a
// society reopened on its store shows the model what it would have.
func ensureCallIDs(calls []llm.ToolCall, view []llm.Message) {
	var seen map[string]bool
	n := 0
	for i := range calls {
		if seen == nil {
			seen = make(map[string]bool)
			for _, m := range view {
				for _, c := range m.ToolCalls {
					seen[c.ID] = true
				}
			}
		}
		for calls[i].ID == "" || seen[calls[i].ID] {
			n++
			calls[i].ID = "call_" + itoa(n)
		}
		seen[calls[i].ID] = true
	}
}

// generate calls the model for a's turn (the handling of message turn), under
// the society's concurrency cap, retrying transient failures with
// exponential backoff. It is the society's one retry layer: the final error
// says how many attempts were made.
func (s *Society) generate(ctx context.Context, a *agent, task, turn string, req *llm.Request) (*llm.Response, error) {
	backoff := s.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		settle, berr := s.charge(a, task, req)
		if berr != nil {
			berr.AgentID = req.Agent
			return nil, berr
		}
		ev := Event{Kind: EventModelCallStarted, Task: task, Agent: a.info.ID, Turn: turn, Attempt: attempt + 1}
		s.emit(ev)
		start := time.Now()
		resp, err := func() (resp *llm.Response, err error) {
			defer func() { settle(resp) }() // a model that panics releases its reservation too
			return s.generateOnce(ctx, req)
		}()
		ev.Kind, ev.Duration = EventModelCallFinished, time.Since(start)
		if err != nil {
			ev.Code, ev.Detail = ErrModel, err.Error()
		} else {
			u := resp.Usage
			ev.Usage = &u
		}
		s.emit(ev)
		if err == nil {
			return resp, nil
		}
		if !llm.IsTransient(err) || attempt >= s.cfg.ModelRetries {
			return nil, &Error{Code: ErrModel, Message: "the model call failed after " + attempts(attempt+1), AgentID: req.Agent, Err: err}
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "model call failed; retrying", slog.String("agent", req.Agent), slog.Int("attempt", attempt+1), slog.String("err", err.Error()))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, &Error{Code: ErrModel, Message: "cancelled while waiting to retry", AgentID: req.Agent, Err: ctx.Err()}
		}
		backoff *= 2
	}
}

// generateOnce makes one attempt: it waits for a model slot, which
// semaphore.Weighted grants in the order they were asked for, then calls the
// model under Config.ModelCallTimeout. A call that fails because that
// deadline passed, while ctx is still live, fails with llm.ErrTimeout, which
// is transient.
func (s *Society) generateOnce(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if err := s.modelSlots.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer s.modelSlots.Release(1)
	callCtx := ctx
	if d := s.cfg.ModelCallTimeout; d > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	resp, err := s.cfg.Model.Generate(callCtx, req)
	if err != nil && ctx.Err() == nil && callCtx.Err() != nil {
		// The model's error is kept as text only: wrapping it would let
		// errors.Is(err, context.DeadlineExceeded) claim that ctx ended.
		return nil, fmt.Errorf("the call passed its deadline of %v: %w: %v", s.cfg.ModelCallTimeout, llm.ErrTimeout, err)
	}
	if err == nil && resp == nil {
		err = errors.New("the model returned no response")
	}
	return resp, err
}

// attempts says "1 attempt" or "n attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return itoa(n) + " attempts"
}

// cachedSystemPrompt returns a's system prompt, assembling it again only when
// what it shows changed since the last time: a's contacts, which change by
// growing or by the society forgetting one, how many of its children have
// reported, which only grows, and what it may still spend. An agent's
// first prompt is assembled at once: there is nothing to compare, and the
// society's lock is taken once, not twice.
func (s *Society) cachedSystemPrompt(a *agent, mem *mind) (string, error) {
	if mem.system != "" {
		now := promptState{forgotten: s.contacts.forgotten.Load(), contacts: s.contacts.count(a.info.ID)}
		s.mu.Lock()
		now.reports, now.budget = a.reports, s.budgetLine(a)
		s.mu.Unlock()
		if now == mem.systemShows {
			return mem.system, nil
		}
	}
	system, shown, err := s.systemPrompt(a)
	if err != nil {
		return "", err
	}
	mem.system, mem.systemShows = system, shown
	return system, nil
}

// promptState is what of an agent's state its system prompt shows, and
// cachedSystemPrompt compares: its contacts (counted, and the registries'
// count of entries forgotten, read first: a contact forgotten and another
// added leave the count as it was), how many of its children have
// reported, and its budget line.
type promptState struct {
	forgotten uint64
	contacts  int
	reports   int32
	budget    string
}

// taskLeadLine returns the line that ends each message root reads on
// task, naming the task's lead: root's system prompt does not list its
// children, one per task ever submitted.
func (s *Society) taskLeadLine(task string) string {
	s.mu.Lock()
	id, role := s.rootKids[task], ""
	if lead := s.agents[id]; lead != nil {
		role = lead.roleName()
	} else {
		id = ""
	}
	s.mu.Unlock()
	return s.lang.taskLead(task, id, role)
}

// systemPrompt assembles a's system prompt from its current state, and
// returns with it that state. Root's leaves out its children, one per task
// ever submitted: each message it reads names the lead of its task instead
// (see taskLeadLine).
func (s *Society) systemPrompt(a *agent) (string, promptState, error) {
	shown := promptState{forgotten: s.contacts.forgotten.Load()}
	contacts := s.contacts.List(a.info.ID)
	shown.contacts = len(contacts)
	if a.info.ID == RootID {
		contacts = slices.DeleteFunc(contacts, func(c Contact) bool { return c.Source == SourceChild })
	}
	// Role names are agents' words: shown as a source line shows them.
	l := s.lang
	f := prompts.Facts{ID: a.info.ID, Role: l.shownRole(a.roleName()), TaskID: a.info.TaskID,
		MaxSteps: s.cfg.MaxSteps, Assigned: a.info.ID != RootID}
	var rolePrompt string
	type group struct{ reported, waiting []string }
	children := map[string]*group{}
	var roles []string // of children, in order of first appearance
	s.mu.Lock()
	f.Budget = s.budgetLine(a)
	shown.reports, shown.budget = a.reports, f.Budget
	if r := s.roles[a.info.RoleID]; r != nil {
		rolePrompt = r.Prompt
	}
	if p := s.agents[a.info.ParentID]; p != nil {
		f.Parent = l.parent(p.info.ID, p.roleName())
		f.ReportTo = p.info.ID
		if p.info.ID == RootID {
			f.ReportTo = UserID
		}
	}
	for _, c := range contacts {
		kid := s.agents[c.ID]
		if c.Source != SourceChild || kid == nil {
			continue
		}
		g := children[c.Role]
		if g == nil {
			g = &group{}
			children[c.Role] = g
			roles = append(roles, c.Role)
		}
		if kid.reported {
			g.reported = append(g.reported, c.ID)
		} else {
			g.waiting = append(g.waiting, c.ID)
		}
	}
	s.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range contacts {
		if c.InterfaceSpec != nil {
			b, _ := json.Marshal(c.InterfaceSpec)
			if key := c.Role + "\x00" + string(b); !seen[key] {
				seen[key] = true
				f.Interfaces = append(f.Interfaces, prompts.Interface{Role: l.shownRole(c.Role), Spec: string(b)})
			}
		}
		if c.Source != SourceChild || children[c.Role] == nil {
			f.Contacts = append(f.Contacts, prompts.Contact{ID: c.ID, Role: l.shownRole(c.Role), Source: string(c.Source), IntroducedBy: c.IntroducedBy, Note: neutralise(clip(oneLine(c.Note), maxNote))})
		}
	}
	for _, r := range roles {
		g := children[r]
		f.Children = append(f.Children, prompts.Children{Role: l.shownRole(r), Reported: idList(g.reported, l.Strings.ListSeparator), Waiting: idList(g.waiting, l.Strings.ListSeparator)})
	}
	system, err := l.System(a.info.ID == RootID, rolePrompt, f)
	return system, shown, err
}

// maxNote is how much of a contact's note the system prompt shows, in
// characters: the note is another agent's words, which must not fill the
// prompt.
const maxNote = 300

// idList joins agent ids with sep, a run of consecutive ids ("agent-2",
// "agent-3", "agent-4") written as its ends ("agent-2..agent-4"): children
// spawned together have consecutive ids, so a list of fifty is short.
func idList(ids []string, sep string) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && nextID(ids[j], ids[j+1]) {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(ids[i])
		if j > i {
			b.WriteString("..")
			b.WriteString(ids[j])
		}
		i = j + 1
	}
	return b.String()
}

// nextID reports whether b is the id after a: the same prefix, and a
// number one greater.
func nextID(a, b string) bool {
	pa, na, ok1 := cutLast(a, "-")
	pb, nb, ok2 := cutLast(b, "-")
	if !ok1 || !ok2 || pa != pb {
		return false
	}
	x, err1 := strconv.Atoi(na)
	y, err2 := strconv.Atoi(nb)
	return err1 == nil && err2 == nil && y == x+1
}

// trimHistory drops the oldest turns while the history is over budget,
// folding them through the summariser when there is one. A turn starts at a
// delivered message; the current turn is never dropped, so tool calls keep
// their results.
func (s *Society) trimHistory(ctx context.Context, agentID string, mem *mind) {
	for _, m := range mem.msgs[mem.sized:] {
		mem.size += messageSize(m)
	}
	mem.sized = len(mem.msgs)
	size := len(mem.summary) + mem.size
	cut := 0
	for size > s.cfg.HistoryBudget {
		next := nextTurn(mem.msgs, cut)
		if next < 0 {
			break // only the current turn is left
		}
		for _, m := range mem.msgs[cut:next] {
			size -= messageSize(m)
		}
		cut = next
	}
	if cut == 0 {
		return
	}
	mem.size, mem.sized = size-len(mem.summary), mem.sized-cut
	dropped := mem.msgs[:cut:cut] // an append to it must not write over what is kept
	if s.cfg.Summarize != nil {
		summary, err := s.cfg.Summarize(ctx, agentID, mem.summary, dropped)
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "summariser failed; dropping turns unsummarised", slog.String("agent", agentID), slog.String("err", err.Error()))
		} else {
			mem.summary, mem.newSummary = summary, true
		}
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "history trimmed", slog.String("agent", agentID), slog.Int("dropped", cut))
	mem.dropped += cut
	// The store drops the recorded messages cut; the others it never had.
	n := min(cut, mem.saved)
	mem.drop += n
	mem.saved -= n
	// Appending reuses the array until it is full, then copies what is
	// kept: the cost of a trim does not grow with the history. Requests
	// made before only see the array up to their length, which appends
	// leave alone.
	mem.msgs = mem.msgs[cut:]
}

// view returns the messages a model call sends: the agent's brief, pinned
// first when trimming dropped it; the summary of what was dropped, or a
// marker saying how many turns were; then the history. When the history is
// still over Config.HistoryBudget (the current turn alone is, since
// trimHistory dropped every turn before it), the content of the current
// turn's earlier tool calls and results is elided, oldest first, until it
// fits or only the last step is whole: one long turn cannot grow without
// bound. The history itself is not changed.
func (s *Society) view(a *agent, mem *mind) []llm.Message {
	if mem.brief == "" && a.info.ID != RootID && a.brief != nil {
		mem.brief = s.briefMessage(a)
	}
	pinned := mem.brief != "" && (len(mem.msgs) == 0 || mem.msgs[0].Content != mem.brief)
	size := len(mem.summary) + mem.size
	for _, m := range mem.msgs[mem.sized:] {
		size += messageSize(m)
	}
	if !pinned && mem.summary == "" && mem.dropped == 0 && size <= s.cfg.HistoryBudget {
		return mem.msgs // nothing to add or elide
	}
	// A buffer the mind keeps, since a model keeps no request after
	// Generate returns (see llm.Model): a long history is copied for each
	// call, not allocated again.
	out := mem.view[:0]
	if pinned {
		out = append(out, llm.Message{Role: llm.RoleUser, Content: mem.brief})
	}
	switch {
	case mem.summary != "":
		out = append(out, llm.Message{Role: llm.RoleUser, Content: s.lang.summary(mem.summary)})
	case mem.dropped > 0:
		out = append(out, llm.Message{Role: llm.RoleUser, Content: s.lang.dropped(mem.dropped)})
	}
	head := len(out)
	out = append(out, mem.msgs...)
	mem.view = out
	if size <= s.cfg.HistoryBudget {
		return out
	}
	// The steps of the current turn before its last one.
	start, last := -1, -1
	for i := len(out) - 1; i >= head; i-- {
		if out[i].Role == llm.RoleAssistant && last < 0 {
			last = i
		}
		if out[i].Role == llm.RoleUser {
			start = i
			break
		}
	}
	elidedResult := s.lang.elided
	for i := start + 1; i >= head+1 && i < last && size > s.cfg.HistoryBudget; i++ {
		m := out[i]
		before := messageSize(m)
		switch {
		case m.Role == llm.RoleTool && len(m.Content) > len(elidedResult):
			m.Content = elidedResult
		case len(m.ToolCalls) > 0:
			calls := slices.Clone(m.ToolCalls)
			for j := range calls {
				if len(calls[j].Arguments) > len(elidedArgs) {
					calls[j].Arguments = json.RawMessage(elidedArgs)
				}
			}
			m.ToolCalls = calls
		}
		out[i] = m
		size -= before - messageSize(m)
	}
	return out
}

// What view puts in place of the arguments of a long turn's earlier tool
// calls; their results become the language's elided note.
const elidedArgs = `{"elided":true}`

// briefMessage returns a's brief as its first message presents it: the
// task_assignment from its parent.
func (s *Society) briefMessage(a *agent) string {
	return s.Format(Message{From: a.info.ParentID, To: a.info.ID, Type: TaskAssignment, Payload: a.brief})
}

// nextTurn returns the index of the first delivered message after from that
// starts a turn, or -1 when the turn at from is the last one.
func nextTurn(msgs []llm.Message, from int) int {
	for i := from + 1; i < len(msgs); i++ {
		if msgs[i].Role == llm.RoleUser {
			return i
		}
	}
	return -1
}

func messageSize(m llm.Message) int {
	n := len(m.Content)
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}
