// Package agentsociety runs a self-organising society of agents inside a Go
// program.
//
// # Overview
//
// A [Society] starts with two agents. root receives the user's requirements;
// user is the host's endpoint, driven by code. Agents create roles
// ([Actor.CreateRole]) and spawn children on them ([Actor.SpawnAgent]), each
// with a validated [TaskBrief]; they talk by asynchronous messages
// ([Actor.Send]) whose sender the society fills in and whose payload it checks
// against the message's [MessageType]; they hand work over as artifacts
// referenced by id ([Actor.PutArtifact]); they report to user, which passes
// each message to the host ([Society.OnUserMessage],
// [Society.WaitForUserMessage]). Each agent keeps only the small context it
// needs: its brief, its contacts and its own messages.
//
// The society owns the rules; the host owns the world. Hard constraints keep
// the organisation under control: the parent of a spawned agent is always
// the caller; an agent spawns only on roles it created; root has at most one
// child per task; the number of agents and the depth of the tree are capped.
// Every refusal is an [*Error] whose [Code] errors.Is can match, and a
// refused operation changes nothing.
//
// An agent is driven by a [Behavior]: Go code given by the host
// ([BehaviorFunc]), or the society's default behaviour for agents spawned
// without one. Each agent handles one message at a time, in arrival order;
// agents run in parallel, each busy agent on a goroutine of its own; an
// idle agent costs no goroutine. A behaviour that fails or panics is
// reported to its agent's parent, and the agent goes on.
//
// # Quick start
//
//	s, err := agentsociety.New(ctx, agentsociety.Config{Root: myRoot})
//	if err != nil { ... }
//	defer s.Close(ctx)
//	task, err := s.SubmitRequirement(ctx, "a static web calculator")
//	reply, err := s.WaitForUserMessage(ctx, func(m agentsociety.Message) bool {
//		return m.TaskID == task
//	})
//
// See the package example for a complete society of code-driven agents.
//
// # What the host plugs in
//
// A model: Config.Model is an [llm.Model], one method that takes an
// agent's system prompt, history and tools and returns text or tool calls
// with the tokens used (see the Config example for an adapter of one's own;
// package llm/openai adapts any OpenAI-compatible endpoint). A store:
// Config.Store is a [store.Store], four methods, checked by the
// conformance suite of package store/storetest (see the Config example
// for a store of one's own; store/filestore and store/natsstore are
// durable). Tools: Config.Tools adds host tools ([Tool]) beside the built-in
// ones, [NewTool] decoding their arguments into a Go type.
//
// [Society] and [Actor] are safe for concurrent use. Agents run in
// parallel, so what the host plugs in is called concurrently and must be
// safe for it: a [Behavior] that drives several agents, the model, tool
// handlers and the store. Callbacks registered with
// [Society.OnUserMessage] run one at a time, in arrival order, and should
// return quickly.
//
// An idle agent costs no goroutine and about a kilobyte of memory with a
// small brief; a model call costs the system prompt and tool schemas (about
// 1,200 tokens) plus the agent's history, bounded by Config.HistoryBudget.
// A [Budget] bounds what a task, or a subtree, may spend.
//
// # Model-driven agents
//
// Agents without a Go behaviour are driven by Config.Model, an [llm.Model]
// (llm/openai adapts any OpenAI-compatible endpoint; llm/llmtest scripts one
// for tests and offline runs). A model-driven child's first message is its
// brief, a task_assignment from its parent, so that it starts working.
// Each delivered message joins the agent's history in the form
// [Society.Format] gives it; the model is called with the agent's system
// prompt (base.txt, then root.txt or the role prompt, then the agent's id,
// role, task, whom it reports to, its turn's call limit, its contacts, its
// children per role with those that reported, and each role's Interface
// Spec once), its history and the tools: find_role_by_name, create_role,
// spawn_agent, send_message, put_artifact, get_artifact, console_print,
// terminate_agent, and the host's [Tool]s ([NewTool] makes one with typed
// arguments; package agentsociety/toolset has seed 004's delegation and
// state tools). A built-in tool refuses an argument key it does not know,
// naming the nearest one. Tool calls run in order and their results, or
// coded errors as JSON, go back to the model, until it answers without a
// tool call, an answer whose calls all succeeded has one with
// "end_turn": true, or Config.MaxSteps calls were made. What the model says
// without a tool call is logged as its thought and reaches nobody: agents
// reach each other only through send_message. A task that goes quiet with
// the user's last message unanswered is reported to user by root (status
// "quiet", see [StatusQuiet]). Model calls across the society run
// in parallel up to Config.MaxModelCalls, granted in arrival order, each
// with its own deadline (Config.ModelCallTimeout). Transient failures and
// calls past their deadline are retried with backoff, in this one layer
// (llm/openai leaves the SDK's own retries off), and a failure that remains
// is reported to the agent's parent, as is a reply cut off at the model's
// output limit without a tool call ([ErrTruncated]). Each history is
// bounded by Config.HistoryBudget: the oldest turns go first, or are folded
// into a summary by Config.Summarize, the brief staying pinned first with a
// marker counting what was dropped; within one long turn the earlier tool
// results are elided.
//
// # Languages
//
// Everything a model reads (the system prompts, the tool descriptions, the
// framing of messages, the markers of a trimmed history, the handoff
// notice, the report of a failed turn) comes from one prompt set, chosen by
// Config.Language: [Chinese], the zero value and the seeds' language, whose
// framing is Requirement 10's (see [FormatMessage]), or [English]. Config.Prompts
// overrides the chosen set file by file. Error messages in tool results are
// English in both languages; their codes are what a model acts on. In
// either language, a line of an agent's text that could pass for a source
// line or a reply hint of either language is shown quoted.
//
// # Governance
//
// A [Budget] bounds the model calls, tokens, spawns and time of a task
// (Config.TaskBudget, [WithBudget]) and, when a parent gives a child a share
// of what it has left ([SpawnSpec].Budget, or budget in spawn_agent), of a
// subtree. A call is charged to the task and to every ancestor with a share
// before it is made and settled after; when a budget runs out no more calls
// are made under it, and the parent, or user for a task, is told once
// ([StatusBudgetExhausted]). [Society.Usage], [Society.AgentUsage] and
// [Society.Tasks] show what was spent and what is left;
// [Society.SetBudget] sets a task's budget and [Society.SetAgentBudget] an
// agent's share, and after a raise the agents the budget stopped go on by
// themselves. The loop guard ([LoopGuard], [ErrLoopDetected]) refuses a
// model-driven agent's message that would carry on a loop, and the
// watchdog (Config.StuckAfter) reports a request left unanswered
// ([StatusStuck]), a task with work in flight that does not move
// ([StatusStalled]) and a task gone quiet without an answer
// ([StatusQuiet]).
//
// # Events
//
// Every fact the society logs is also an [Event], numbered in order:
// [Society.Events] reads what is kept and [Society.WatchEvents] follows the
// society live. Each event names the turn it happened in (the message being
// handled), which links every turn to the turn that sent its message: the
// subpackages that draw traces, diagrams and the inspector are built on it.
// Config.EventRetention bounds what is kept; a store that implements
// store.EventLog keeps it across restarts.
//
// A run can be replayed: wrap Config.Model in llm.Record and save its
// lines; llm.Replay answers a new run's model calls from them, matched per
// agent and per call (agents interleave differently in each run) and with
// the recorded ids mapped to the new run's, so that the same requirement
// gives the same organisation, messages and artifacts. llm.Fork replays up
// to the event [ModelCallsUpTo] is given, then lets a live model go on.
//
// # Contacts and introductions
//
// Every agent has a [ContactRegistry] entry list from birth: root knows user,
// user knows root, any other agent knows its parent; a parent knows each
// child it spawns, and a child knows the collaborators its brief names.
// A first message from A to B adds A to B's contacts, and an
// introduction_response from X to A about T adds T to A's contacts with T's
// real role and interface spec. Under [ContactOpen] (the default) the
// registry only records who knows whom; under [ContactStrict] a message to
// an agent outside the sender's registry is refused with [ErrUnknownContact],
// and so is a brief presetting a collaborator its parent does not know; an
// introduction adds a contact only to an agent that asked for one
// ([ErrUnsolicitedIntroduction]), a rule kept in memory, so that after a
// restart an unanswered request is asked again.
// Under both, any agent may write to user and user to any agent.
//
// # Persistence
//
// A society records its organisation, contacts, collaboration requests,
// project and private state, model-driven agents' histories, accepted
// messages and artifacts in a [store.Store] given by the host; the default
// is an in-memory store, and store/filestore keeps them in a directory.
// Messages are recorded when accepted and marked finished when handled, with
// what the turn added to the agent's history (never the whole history, so
// a turn costs the store what it added; a turn that adds nothing has its
// end recorded behind, with others, and Close records them all), so a
// society reopened on a store
// that survived its process delivers again what was accepted and never
// finished (at least once), spawns nothing twice for a message handled
// again, and runs on the timeouts of pending requests. The in-memory store, which no crash
// survives, is spared a record per message: it gets the messages still
// queued when the society closes (see [store.Volatile]). Go behaviours are
// code, not state: give them back with Config.RestoreBehavior. A message to
// user stays pending until the host has it (see [Society.OnUserMessage]).
// What has ended, a settled request or a terminated agent, is forgotten
// Config.Retention after it ended, in memory and in the store, so that a
// long-lived society and its store do not grow.
//
// Every change goes one way: it is checked against the society's state
// under its lock, recorded in the store with no lock held, then applied to
// memory; nothing waits for the store, a model or a log handler while the
// lock is held, so a slow store delays only the operation that wrote to it,
// and [Society.Close] returns by its context's deadline.
package agentsociety
