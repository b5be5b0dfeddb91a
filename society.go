package agentsociety

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"agentsociety/internal/ids"
	"agentsociety/llm"
	"agentsociety/store"
)

// The ids of the two built-in agents.
const (
	RootID = "root"
	UserID = "user"
)

// Defaults for the zero values of Config.
const (
	DefaultMaxAgents        = 10_000
	DefaultMaxQueued        = 10_000
	DefaultMaxDepth         = 16
	DefaultMaxArtifactBytes = 16 << 20
	DefaultUserInbox        = 1024
	DefaultMaxSteps         = 16
	DefaultMaxModelCalls    = 16
	DefaultModelRetries     = 3
	DefaultRetryBackoff     = 500 * time.Millisecond
	DefaultModelCallTimeout = 2 * time.Minute
	DefaultHistoryBudget    = 24_000
	DefaultRetention        = 24 * time.Hour
	DefaultStuckAfter       = 10 * time.Minute
)

// Config configures a Society. The zero value is a working configuration:
// every zero field means the documented default.
type Config struct {
	// Store keeps the society's state. Nil means a new store.NewMemory().
	Store store.Store
	// Logger receives the society's records. Nil means slog.Default().
	Logger *slog.Logger

	// Root drives the root agent. Nil means DefaultBehavior.
	Root Behavior
	// DefaultBehavior drives every agent that was spawned without a
	// behaviour of its own. Nil means the model (Config.Model); with no
	// model either, such agents log each message at Warn level and drop it.
	DefaultBehavior Behavior
	// RestoreBehavior, when set, gives each agent restored from the store
	// its Go behaviour again: behaviours are code, not state, so a society
	// reopened on a store cannot know them. It is called once per restored
	// agent, during New; nil means DefaultBehavior, as for an agent spawned without
	// a behaviour.
	RestoreBehavior func(a Agent, r Role) Behavior

	// ContactPolicy decides whether unknown contacts may be messaged. The
	// zero value is ContactOpen; New refuses a value that is neither
	// ContactOpen nor ContactStrict.
	ContactPolicy ContactPolicy
	// MaxAgents caps the number of agents, root and user aside. Zero means
	// DefaultMaxAgents.
	MaxAgents int
	// MaxDepth caps the depth of the organisation: root is at depth 0 and its
	// children at depth 1. Zero means DefaultMaxDepth.
	MaxDepth int
	// MaxQueued caps the messages waiting in one agent's mailbox (the one
	// it is handling aside): a message to an agent that already has
	// MaxQueued waiting is refused with ErrMailboxFull, and changes nothing.
	// The society's own messages are exempt, so that none is lost to the
	// cap: a handoff, the settlement of a request whose timeout passed or
	// whose responder ended, a failure report. So is a collaboration_response:
	// each request is answered once, so answers cannot flood a mailbox, and
	// refusing one would leave its request unsettled. Zero means
	// DefaultMaxQueued; a negative value means no cap.
	MaxQueued int
	// TaskBudget is every task's budget unless SubmitRequirement's
	// WithBudget or SetBudget gives it another (see Budget). The zero
	// value is unlimited.
	TaskBudget Budget
	// StuckAfter is how long work may stand still before the watchdog
	// reports it, once for each time it does:
	//   - a collaboration request without a timeout, unanswered: to the
	//     requester's parent (user, for a lead), from the requester, with
	//     status StatusStuck;
	//   - a task with messages queued or being handled, none of whose
	//     messages began to be handled by an agent in that time (a message
	//     reaching user is not the task moving): to user, from root,
	//     with status StatusStalled, naming the agents it waits for (those
	//     of it with messages in hand or queued) and how many each has
	//     queued; and, for each such agent below a lead, to its parent,
	//     from the agent. A task that waits only for a request's timeout
	//     is not stalled. The watchdog looks once in each StuckAfter, so
	//     a stall is reported between StuckAfter and twice that after the
	//     last delivery.
	// Zero means DefaultStuckAfter; a negative value turns the watchdog
	// off.
	StuckAfter time.Duration
	// LoopGuard refuses messages that carry on a loop between agents; the
	// zero value is on, with the defaults (see LoopGuard).
	LoopGuard LoopGuard
	// EventRetention is how many of the newest events the society keeps,
	// in memory and, if the store keeps events (store.EventLog) and is not
	// volatile, in the store too (see Society.Events). Zero means
	// DefaultEventRetention; a negative value turns events off.
	EventRetention int
	// MaxArtifactBytes caps an artifact's size. Zero means DefaultMaxArtifactBytes.
	MaxArtifactBytes int64
	// Retention is how long the society keeps in memory what has ended,
	// so that nothing it holds grows for its whole life. A collaboration
	// request is forgotten Retention after it was settled: a late answer
	// to it is then refused with ErrUnknownRequest rather than
	// ErrRequestClosed. A terminated agent is forgotten Retention after it
	// ended, with its spawn key, its contact registry, its private state,
	// the requests it made or was asked, and the roles it created that no
	// remaining agent is on: Agent, Agents, Roles and FindRoleByName no
	// longer show them, and a message to it is refused with
	// ErrAgentNotFound rather than ErrAgentTerminated. The entries about it
	// in the registries of its parent, root, user and the agents it knew
	// go with it (an agent that knew it without it knowing them keeps its
	// entry). A task whose agents are all forgotten, and which has been
	// quiet for Retention, is forgotten too: its budget, what it spent and
	// its project state; a message on it starts it afresh. What the
	// society forgets, it removes from the store (store.Removal); a store
	// that fails to remove it keeps it, and a society reopened on that
	// store forgets it again Retention after opening. What is due may be
	// forgotten up to a 64th of Retention late, so that the society is
	// not read whole for each thing it forgets. Zero means
	// DefaultRetention; a negative value means nothing is forgotten.
	Retention time.Duration

	// Model drives every agent that has no Go behaviour (neither its own nor
	// Root or DefaultBehavior): see the package documentation on model-driven agents.
	Model llm.Model
	// MaxSteps caps the model calls of one turn (one delivered message).
	// Zero means DefaultMaxSteps.
	MaxSteps int
	// MaxModelCalls caps the model calls in flight across the society. Zero
	// means DefaultMaxModelCalls. Calls beyond the cap wait for a slot and
	// are granted one in the order they asked (first come, first served), so
	// an agent whose calls are slow or many cannot starve the others: each
	// of its calls, retries included, queues behind those already waiting.
	MaxModelCalls int
	// ModelCallTimeout is the deadline of each model call (each attempt),
	// counted from when the call gets its slot (see MaxModelCalls). A call
	// that passes it fails as a transient llm.ErrTimeout would: it is
	// retried within ModelRetries, and when none is left the turn ends with
	// an ErrModel error that is reported to the agent's parent. Zero means
	// DefaultModelCallTimeout; a negative value means no deadline beyond the
	// society's own life.
	ModelCallTimeout time.Duration
	// ModelRetries is how many times a transient model failure (one that
	// llm.IsTransient accepts, or a call past ModelCallTimeout) is retried,
	// so a call makes at most ModelRetries+1 attempts. This is the one retry
	// layer: llm/openai makes one HTTP request per attempt by default. No
	// slot is held while waiting to retry. Zero means DefaultModelRetries; a
	// negative value means none.
	ModelRetries int
	// RetryBackoff is the wait before the first retry; it doubles for each
	// retry after. Zero means DefaultRetryBackoff.
	RetryBackoff time.Duration
	// HistoryBudget caps, in bytes of content, the history a model-driven
	// agent sends with each call; the oldest turns go first, and within a
	// turn over the budget by itself its earlier tool calls and results are
	// elided. The system prompt is never cut, and the agent's brief stays
	// first, with a marker of how many messages were dropped. Zero means
	// DefaultHistoryBudget.
	HistoryBudget int
	// Summarize, when set, folds dropped turns into a summary the agent
	// keeps seeing.
	Summarize Summarizer
	// Language selects the model-facing text: the system prompts, the tool
	// descriptions, the framing of messages, the history markers, the
	// handoff notice and the failure report. The zero value means Chinese,
	// whose framing is Requirement 10's (see FormatMessage); English ships
	// beside it. Error messages in tool results are English in both.
	Language Language
	// Prompts overrides the embedded prompts of Language file by file:
	// base.txt, root.txt, runtime.tmpl (a text/template) and strings.json
	// (the short strings and tool descriptions, overridden key by key; see
	// internal/prompts/zh/strings.json for the keys). Pass
	// os.DirFS("data/prompts") for a host directory. Nil means the embedded
	// defaults.
	Prompts fs.FS
	// Tools are host tools offered to model-driven agents beside the
	// built-in ones.
	Tools []Tool

	// UserConsole, when set, receives every message to user as FormatMessage
	// formats it, less the reply hint meant for agents, and what agents print
	// with console_print.
	UserConsole io.Writer
	// UserInbox caps how many messages to user are kept for
	// WaitForUserMessage until a waiter claims them; the oldest go first.
	// Zero means DefaultUserInbox.
	UserInbox int
	// OnUserMessage, when set, is registered as [Society.OnUserMessage]
	// registers a callback, before New restores the store: unlike a
	// callback registered once New has returned, it also has the messages
	// to user that the store held pending, which New delivers again.
	OnUserMessage func(Message)
}

// Society is a running society of agents. It is safe for concurrent use.
//
// A Society starts with two agents: root, which receives requirements, and
// user, the host's endpoint. Everything else is created by agents (or by the
// host acting as an agent through [Society.Actor]).
type Society struct {
	// Locks, in the order they are taken: mu, then a ContactRegistry's
	// lock or a mailbox's. The user endpoint's locks are never held with
	// mu. No store call, model call or log handler runs with mu held:
	// every change goes through apply (change.go), which records it with
	// mu released.
	//
	// Goroutines: every drainer is counted in wg with mu held and closed
	// false (goFunc, or enqueue, whose drainer startDrainer starts once mu
	// is released), and so is every request timer (armTimeout) and the
	// prune timer (armPrune); wg also counts the changes being recorded,
	// and Close waits for wg. The event log's writer (see eventLog) and the
	// finisher's goroutine (see finisher) are the two outside wg: New
	// starts them, and Close stops them once wg is done, so that they
	// write the last events and records.
	cfg   Config
	store store.Store
	log   *slog.Logger
	user  *userEndpoint

	events     *eventLog           // the event log (see events.go)
	finishing  *finisher           // the records of handled messages, written behind (see finish.go)
	lang       *language           // the model-facing text
	modelSlots *semaphore.Weighted // caps model calls in flight

	roleIDs  *ids.Sequence
	agentIDs *ids.Sequence
	msgIDs   ids.Epoch

	// mu guards the organisation: roles, agents and their status, root's
	// children, requests, state, the message counter and the claims of
	// changes in flight. Contacts have their own lock; they change with mu
	// held. A plain mutex: almost every use changes something.
	mu        sync.Mutex
	seq       uint64 // numbers accepted messages; a message's id is made from its number
	roles     map[string]*Role
	roleOrder []string
	roleKeys  map[roleKey]string // (creator, name) -> role id
	agents    map[string]*agent
	rootKids  map[string]string    // taskID -> root's child
	tasks     map[string]*activity // the tasks busy or awaited (see quiet.go)
	ledgers   map[string]*ledger   // by task and by agent (see budget.go)
	// taskAgents holds, for each task, the agents of it the society
	// holds, ended or not, in no order, root under the task of no id
	// (see index): a task none is left of has ended, and its ledger is
	// forgotten (see hasAgents and prune.go). The watchdog and the
	// report of a quiet task look through a task's agents here, not
	// through all.
	taskAgents map[string][]*agent
	// roleAgents counts, for each role, the agents on it the society
	// holds: a role none is on, whose creator is gone, is forgotten.
	roleAgents map[string]int
	loops      loops // the loop guard's state (see loopguard.go)

	roleTools sync.Map          // role name -> []llm.Tool, the tools its agents see (see toolsFor)
	spawnKeys map[string]string // spawn key -> child (see turn)
	handoffs  map[string]string // agent being terminated -> its handoff message
	requests  map[string]*request
	intros    introductions
	state     map[stateKey]StateValue
	live      int    // agents other than root and user
	added     uint64 // agents added so far, for their creation order
	adding    int    // agents being added by changes in flight
	claims    map[string]chan struct{}
	contacts  ContactRegistry
	// retired holds what ended, in the order it ended, to be forgotten
	// Config.Retention later; pruneTimer fires when the oldest is due, or
	// a little later (see prune.go); pruned is when it last fired.
	retired    []retiree
	pruneTimer *time.Timer
	pruned     time.Time

	// closed is set under mu; apply checks it under mu, so no change is
	// checked after Close began. Drainers read it alone: a
	// stale false only costs one more handled message.
	closed atomic.Bool
	// volatile is set for a store.Volatile store: messages are recorded
	// in it only at Close (see saveQueued), and restored holds the ids of
	// the pending messages the society was opened with.
	volatile bool
	restored map[string]struct{}

	wg   sync.WaitGroup // drainers, request timers and changes in flight: Close waits for them
	done chan struct{}  // closed by Close: wakes whoever waits on the society
	// halted is closed once Close has seen wg done: no goroutine of the
	// society is left to log an event, so WatchEvents may end.
	halted chan struct{}
	// closeDone is closed when the first Close has finished, in time or not.
	closeDone chan struct{}
	closeErr  error // set before closeDone is closed
	runCtx    context.Context
	cancel    context.CancelFunc
}

type roleKey struct{ creator, name string }

// New starts a society on cfg.Store, restoring what it holds: the
// organisation, contacts, collaboration requests (their timeouts run on),
// state, agents' histories, and the messages accepted and never finished,
// which are delivered again. Restored agents are driven by what
// cfg.RestoreBehavior gives them, else as agents spawned without a behaviour
// are. The context bounds the loading only.
func New(ctx context.Context, cfg Config) (*Society, error) {
	if cfg.Store == nil {
		cfg.Store = store.NewMemory()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxAgents <= 0 {
		cfg.MaxAgents = DefaultMaxAgents
	}
	if cfg.MaxQueued == 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.MaxDepth <= 0 {
		cfg.MaxDepth = DefaultMaxDepth
	}
	if cfg.MaxArtifactBytes <= 0 {
		cfg.MaxArtifactBytes = DefaultMaxArtifactBytes
	}
	if cfg.UserInbox <= 0 {
		cfg.UserInbox = DefaultUserInbox
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	if cfg.MaxModelCalls <= 0 {
		cfg.MaxModelCalls = DefaultMaxModelCalls
	}
	switch {
	case cfg.ModelRetries == 0:
		cfg.ModelRetries = DefaultModelRetries
	case cfg.ModelRetries < 0:
		cfg.ModelRetries = 0
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.ModelCallTimeout == 0 {
		cfg.ModelCallTimeout = DefaultModelCallTimeout
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.HistoryBudget <= 0 {
		cfg.HistoryBudget = DefaultHistoryBudget
	}
	if cfg.ContactPolicy != ContactOpen && cfg.ContactPolicy != ContactStrict {
		return nil, fmt.Errorf("agentsociety: Config.ContactPolicy: %w", newError(ErrInvalidArgument,
			"unknown contact policy "+itoa(int(cfg.ContactPolicy))+": use ContactOpen (the zero value) or ContactStrict"))
	}
	if err := cfg.TaskBudget.check(); err != nil {
		return nil, fmt.Errorf("agentsociety: Config.TaskBudget: %w", err)
	}
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = DefaultStuckAfter
	}
	if cfg.LoopGuard.Rounds <= 0 {
		cfg.LoopGuard.Rounds = DefaultLoopRounds
	}
	if cfg.LoopGuard.Repeats <= 0 {
		cfg.LoopGuard.Repeats = DefaultLoopRepeats
	}
	if err := checkTools(cfg.Tools); err != nil {
		return nil, err
	}
	cfg.Tools = slices.Clone(cfg.Tools)
	lang, err := loadLanguage(cfg.Language, cfg.Prompts)
	if err != nil {
		return nil, fmt.Errorf("agentsociety: %w", err)
	}
	s := &Society{
		cfg:        cfg,
		store:      cfg.Store,
		log:        cfg.Logger,
		roleIDs:    ids.NewSequence("role"),
		agentIDs:   ids.NewSequence("agent"),
		msgIDs:     ids.NewEpoch("msg"),
		done:       make(chan struct{}),
		halted:     make(chan struct{}),
		closeDone:  make(chan struct{}),
		roles:      make(map[string]*Role),
		roleKeys:   make(map[roleKey]string),
		agents:     make(map[string]*agent),
		rootKids:   make(map[string]string),
		tasks:      make(map[string]*activity),
		loops:      newLoops(),
		ledgers:    make(map[string]*ledger),
		taskAgents: make(map[string][]*agent),
		roleAgents: make(map[string]int),
		spawnKeys:  make(map[string]string),
		handoffs:   make(map[string]string),
		requests:   make(map[string]*request),
		claims:     make(map[string]chan struct{}),
		state:      make(map[stateKey]StateValue),
		lang:       lang,
		modelSlots: semaphore.NewWeighted(int64(cfg.MaxModelCalls)),
	}
	if v, ok := cfg.Store.(store.Volatile); ok && v.Volatile() {
		s.volatile = true
		s.restored = make(map[string]struct{})
	}
	if s.events, err = openEventLog(ctx, &cfg, s.volatile); err != nil {
		return nil, err
	}
	s.user = newUserEndpoint(s, cfg.UserConsole, cfg.UserInbox)
	if cfg.OnUserMessage != nil {
		s.user.subscribe(cfg.OnUserMessage)
	}
	s.runCtx, s.cancel = context.WithCancel(context.Background())

	now := time.Now()
	root := &agent{info: Agent{ID: RootID, Status: StatusActive, CreatedAt: now}, role: &Role{Name: RootID}, behavior: cfg.Root}
	s.agents[RootID] = root
	s.index(root)
	s.user.self = &agent{info: Agent{ID: UserID, Status: StatusActive, CreatedAt: now}, role: &Role{Name: UserID}, behavior: s.user}
	s.agents[UserID] = s.user.self
	s.contacts.Add(RootID, Contact{ID: UserID, Role: UserID, Source: SourceSystem, AddedAt: now})
	s.contacts.Add(UserID, Contact{ID: RootID, Role: RootID, Source: SourceSystem, AddedAt: now})

	s.finishing = newFinisher(s.store, s.log)
	go s.finishing.run()
	if err := s.restore(ctx); err != nil {
		// restore may have started drainers and timers before it failed:
		// stop them, so that nothing outlives the failed New.
		s.stop()
		s.cancel()
		s.wg.Wait()
		s.finishing.close()
		return nil, s.saveQueued(err)
	}
	if s.events.stop != nil {
		go s.events.writeBehind()
	}
	return s, nil
}

// Close stops the society. It refuses new messages and changes at once,
// stops each agent after the message it is handling, and waits for those
// handlers, and for changes being recorded, to return. Messages accepted and
// not yet handled stay in the store as pending; a [store.Volatile] store
// gets them now, and an error recording them is returned. A handler that
// Close cut short (a model-driven turn whose next step was refused with
// ErrClosed) leaves its message pending too: it is handled again when the
// society reopens, as after a crash, and what the turn sent before may be
// sent again.
//
// If ctx ends first, Close cancels the handlers' contexts and returns
// ctx.Err() at once, whatever a handler, the model, the store or a log handler
// is doing; the society's goroutines end as soon as those return and the last
// events and records of handled messages are written (those writes are bounded
// by the store, not by ctx), and a volatile store's queue is recorded then (a
// failure is logged at Error level). A second Close waits, up to the end of
// its own ctx, for the society to have stopped, and returns the error
// recording the queue, if any: Close(ctx) then Close(context.Background())
// gives up waiting at ctx's deadline, then waits for the rest. Since Close
// waits for the behaviours, a behaviour must not call it (it may start it in a
// goroutine).
func (s *Society) Close(ctx context.Context) error {
	first := s.stop()
	if first {
		s.user.close()
		go func() { // not counted in wg: it is what waits for wg
			s.wg.Wait()
			close(s.halted)
			s.finishing.close()
			s.events.close()
			s.cancel()
			s.closeErr = s.saveQueued(nil)
			close(s.closeDone)
		}()
	}
	select {
	case <-s.closeDone:
		return s.closeErr
	case <-ctx.Done():
		select {
		case <-s.closeDone: // both ready: closed is what counts
			return s.closeErr
		default:
		}
		if first { // the handlers are cut short; a second Close only waits
			s.cancel()
		}
		return ctx.Err()
	}
}

// stop marks the society closed, stops the request timers and wakes
// whoever waits on it. It reports false if the society was closed already.
func (s *Society) stop() bool {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return false
	}
	s.closed.Store(true)
	s.stopTimeouts()
	s.stopPrune()
	s.mu.Unlock()
	close(s.done)
	return true
}

func (s *Society) isClosed() bool { return s.closed.Load() }

// Done returns a channel that is closed when the society starts closing
// (Close was called): for a goroutine that waits on the society to stop
// with it. (A reader of [Society.WatchEvents] needs no such watch: the
// iteration ends by itself once the society has stopped.) It is safe to
// call from any goroutine.
func (s *Society) Done() <-chan struct{} { return s.done }

// Actor returns a handle to act as agent id: whatever is done through it is
// done as that agent, under the same rules an agent's own behaviour follows.
// The handle works on the agent's own task; see [Actor.WithTask].
func (s *Society) Actor(id string) (*Actor, error) {
	s.mu.Lock()
	a := s.agents[id]
	s.mu.Unlock()
	if a == nil {
		return nil, &Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(id), AgentID: id}
	}
	return &Actor{s: s, a: a, taskID: a.info.TaskID}, nil
}

// Agent returns the agent with the given id, root and user included. A
// terminated agent is forgotten Config.Retention after it ended.
func (s *Society) Agent(id string) (Agent, bool) {
	s.mu.Lock()
	a := s.agents[id]
	if a == nil {
		s.mu.Unlock()
		return Agent{}, false
	}
	v := a.view()
	s.mu.Unlock()
	return v.agent(), true
}

// Agents returns every agent other than root and user, oldest first,
// terminated ones included until Config.Retention after they ended.
func (s *Society) Agents() []Agent {
	type ordered struct {
		order uint64
		view  agentView
	}
	s.mu.Lock()
	list := make([]ordered, 0, len(s.agents))
	for _, a := range s.agents {
		if a.info.ID != RootID && a.info.ID != UserID {
			list = append(list, ordered{a.order, a.view()})
		}
	}
	s.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].order < list[j].order })
	out := make([]Agent, len(list))
	for i, a := range list {
		out[i] = a.view.agent()
	}
	return out
}

// Role returns the role with the given id.
func (s *Society) Role(id string) (Role, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.roles[id]
	if r == nil {
		return Role{}, false
	}
	return r.clone(), true
}

// Roles returns every role, oldest first. A role created by an agent that
// was forgotten (see Config.Retention) is forgotten with it, once no agent
// the society has is on it.
func (s *Society) Roles() []Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Role, len(s.roleOrder))
	for i, id := range s.roleOrder {
		out[i] = s.roles[id].clone()
	}
	return out
}

// FindRoleByName returns every role named name, whoever created it, oldest
// first. It returns nil when there is none.
func (s *Society) FindRoleByName(name string) []Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Role
	for _, id := range s.roleOrder {
		if r := s.roles[id]; r.Name == name {
			out = append(out, r.clone())
		}
	}
	return out
}

// Contacts returns agent id's contact registry in the order entries were added.
func (s *Society) Contacts(id string) ([]Contact, error) {
	if _, ok := s.Agent(id); !ok {
		return nil, &Error{Code: ErrAgentNotFound, Message: "no agent " + strconvQuote(id), AgentID: id}
	}
	return s.contacts.List(id), nil
}

// IsKnown reports whether to is in from's contact registry. It answers the
// same under both contact policies.
func (s *Society) IsKnown(from, to string) bool { return s.contacts.IsKnown(from, to) }

// ContactPolicy returns the policy the society enforces.
func (s *Society) ContactPolicy() ContactPolicy { return s.cfg.ContactPolicy }

// refuse logs a refused operation and returns err.
func (s *Society) refuse(op, by string, err *Error) *Error {
	s.emit(Event{Kind: EventRefused, Agent: by, Name: op, Code: err.Code, Detail: err.Error()})
	s.log.LogAttrs(context.Background(), slog.LevelInfo, "refused",
		slog.String("op", op), slog.String("by", by), slog.String("code", string(err.Code)), slog.String("detail", err.Error()))
	return err
}

// storeError wraps a store failure, after which nothing has changed.
func storeError(err error) *Error {
	return &Error{Code: ErrStore, Message: "the store failed; nothing changed", Err: err}
}
