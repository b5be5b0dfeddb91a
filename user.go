package agentsociety

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"agentsociety/internal/ids"
	"agentsociety/internal/inbox"
	"agentsociety/store"
)

// SubmitRequirement submits a requirement in natural language: it makes a
// new task id and sends text from user to root on that task.
func (s *Society) SubmitRequirement(ctx context.Context, text string, opts ...RequirementOption) (taskID string, err error) {
	if blank(text) {
		return "", s.refuse("submit_requirement", UserID, &Error{Code: ErrInvalidArgument, Message: "the requirement is empty", MissingFields: []string{"text"}})
	}
	taskID = ids.Random("task")
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(ctx, s, taskID); err != nil {
			return "", err
		}
	}
	if _, err := s.userActor().WithTask(taskID).SendText(ctx, RootID, text); err != nil {
		return "", err
	}
	return taskID, nil
}

// A RequirementOption sets up a task before its requirement is sent. A
// nil option is none.
type RequirementOption func(ctx context.Context, s *Society, taskID string) error

// WithBudget gives the task its own budget instead of Config.TaskBudget
// (see Budget). A negative field is refused with ErrInvalidArgument, and
// nothing is sent.
func WithBudget(b Budget) RequirementOption {
	return func(ctx context.Context, s *Society, taskID string) error { return s.SetBudget(ctx, taskID, b) }
}

// SendTextToAgent sends text from user to agent agentID. An empty taskID
// means the receiver's own task; root has none, so a message to root without
// a taskID starts a new task, as SubmitRequirement does.
func (s *Society) SendTextToAgent(ctx context.Context, agentID, text, taskID string) (Message, error) {
	if taskID == "" {
		if agentID == RootID {
			taskID = ids.Random("task")
		} else if a, ok := s.Agent(agentID); ok {
			taskID = a.TaskID
		}
	}
	return s.userActor().WithTask(taskID).SendText(ctx, agentID, text)
}

// OnUserMessage registers f to be called with every message sent to user,
// in arrival order, from the user endpoint's goroutine: f should return
// quickly. It returns a function that unregisters f: once that has
// returned, f is not called again (a call under way may still run on). f
// may unregister itself. A nil f registers nothing. Close waits for the
// endpoint's goroutine, so f must not call Close (it may start it in a
// goroutine): a Close from f waits for f until Close's own context ends.
//
// On a durable store a message to user stays pending until the host has it:
// until it was written to Config.UserConsole, a callback has run with it, or
// a WaitForUserMessage has returned it.
// A society reopened on the store delivers again those the host never had.
func (s *Society) OnUserMessage(f func(Message)) (unregister func()) {
	if f == nil {
		return func() {}
	}
	return s.user.subscribe(f)
}

// WaitForUserMessage waits for a message to user that matches filter (nil
// matches any) and returns it. Each message to user is returned by at most
// one call: the oldest unclaimed match, which may have arrived before the
// call. It returns ctx.Err() when ctx ends first, and ErrClosed when the
// society closes. filter runs under the endpoint's lock and must not call
// the society.
//
// A filter that panics is the host's bug: the panic is logged at Error level
// and this call returns it as an error with code ErrInvalidArgument; the
// message it was looking at is treated as not matching, so it goes to
// another waiter or stays in the inbox, and the endpoint goes on working.
//
// Unclaimed messages wait in an inbox of Config.UserInbox messages; when it
// is full the oldest is dropped. A dropped message the host never had (by
// the console or a callback) is logged at Error level and counted by
// [Society.DroppedUserMessages]; on a durable store it stays pending, so a
// society opened again on the store delivers it again.
func (s *Society) WaitForUserMessage(ctx context.Context, filter func(Message) bool) (Message, error) {
	return s.user.wait(ctx, filter)
}

// DroppedUserMessages returns how many messages to user that the host never
// had were dropped because the inbox of WaitForUserMessage was full.
func (s *Society) DroppedUserMessages() int64 { return s.user.dropped.Load() }

func (s *Society) userActor() *Actor {
	return &Actor{s: s, a: s.user.self}
}

// userEndpoint is the behaviour of user: it hands each message to the
// host, and records that the message ended once the host has it (see
// OnUserMessage). Its locks are never held with Society.mu, nor across a
// store call.
type userEndpoint struct {
	s         *Society
	self      *agent // user's agent state
	console   io.Writer
	consoleMu sync.Mutex
	dropped   atomic.Int64
	box       *inbox.Box[userMessage] // the callbacks, the unclaimed messages and the waiters
}

// userMessage is a message in the user inbox; had is set when callbacks
// had it, so that its end is recorded already.
type userMessage struct {
	Message
	had bool
}

// filterPanic is the error of a WaitForUserMessage call whose filter
// panicked on m: the host's bug, for the caller whose filter it is.
func filterPanic(m userMessage, r any) error {
	return &Error{Code: ErrInvalidArgument, Message: fmt.Sprintf("the WaitForUserMessage filter panicked on message %s: %v", m.ID, r)}
}

// filterPanicked logs err, the panic of a WaitForUserMessage filter.
func (u *userEndpoint) filterPanicked(ctx context.Context, err error) {
	u.s.log.LogAttrs(ctx, slog.LevelError, "WaitForUserMessage filter panicked; its caller gets the error", slog.String("err", err.Error()))
}

func newUserEndpoint(s *Society, console io.Writer, limit int) *userEndpoint {
	return &userEndpoint{s: s, console: console,
		box: inbox.New(limit, filterPanic, func() error { return errClosed() })}
}

// HandleMessage delivers m to the log, the console, the callbacks and then a
// waiter or the inbox.
func (u *userEndpoint) HandleMessage(ctx context.Context, _ *Actor, m Message) error {
	role := u.s.roleNameOf(m.From)
	u.s.log.LogAttrs(ctx, slog.LevelInfo, "message to user",
		slog.String("msg", m.ID), slog.String("from", m.From), slog.String("role", role), slog.String("task", m.TaskID))
	u.print(u.s.lang.formatMessage(m, role, false) + "\n\n")
	called := u.box.Call(userMessage{Message: m}, u.call)
	had := called > 0 || u.console != nil
	claimed, drop, panics := u.box.Put(userMessage{m, had})
	for _, err := range panics {
		u.filterPanicked(ctx, err)
	}
	if had || claimed {
		u.ended(ctx, m.ID)
	}
	if drop != nil && !drop.had {
		n := u.dropped.Add(1)
		u.s.log.LogAttrs(ctx, slog.LevelError, "user inbox full: dropped the oldest unclaimed message",
			slog.String("msg", drop.ID), slog.String("from", drop.From), slog.Int64("dropped", n))
	}
	return nil
}

// ended records that the host has message id. Nothing is recorded on a
// volatile store, whose queue Close records (see unclaimed).
func (u *userEndpoint) ended(ctx context.Context, id string) {
	if u.s.volatile {
		return
	}
	if err := u.s.record(context.WithoutCancel(ctx), store.Change{Finished: []string{id}}); err != nil {
		u.s.log.LogAttrs(ctx, slog.LevelError, "recording that the host has a message failed; it is delivered again on reopening",
			slog.String("msg", id), slog.String("err", err.Error()))
	}
}

// unclaimed returns the messages in the inbox that the host never had.
func (u *userEndpoint) unclaimed() []Message {
	var out []Message
	for _, m := range u.box.Items() {
		if !m.had {
			out = append(out, m.Message)
		}
	}
	return out
}

// call runs a host callback; a panic in it is the host's bug, logged and
// contained so that the endpoint keeps delivering.
func (u *userEndpoint) call(f func(userMessage), m userMessage) {
	defer func() {
		if r := recover(); r != nil {
			u.s.log.Error("OnUserMessage callback panicked", slog.Any("panic", r), slog.String("msg", m.ID))
		}
	}()
	f(m)
}

// print writes to the user's console, if there is one. Agents print from
// their own goroutines (console_print), so writes are serialised here and
// the host's writer need not be safe for concurrent use.
func (u *userEndpoint) print(text string) {
	if u.console == nil {
		return
	}
	u.consoleMu.Lock()
	defer u.consoleMu.Unlock()
	io.WriteString(u.console, text)
}

func (u *userEndpoint) subscribe(f func(Message)) func() {
	return u.box.Subscribe(func(m userMessage) { f(m.Message) })
}

func (u *userEndpoint) wait(ctx context.Context, filter func(Message) bool) (Message, error) {
	var match func(userMessage) bool
	if filter != nil {
		match = func(m userMessage) bool { return filter(m.Message) }
	}
	m, fromInbox, err := u.box.Take(ctx, match)
	if err != nil {
		if fromInbox { // a panic on a message offered meanwhile is logged by HandleMessage
			u.filterPanicked(ctx, err)
		}
		return Message{}, err
	}
	if fromInbox && !m.had {
		u.ended(ctx, m.ID)
	}
	return m.Message, nil
}

func (u *userEndpoint) close() { u.box.Close() }
