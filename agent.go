package agentsociety

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"agentsociety/internal/mailbox"
	"agentsociety/store"
)

// Role is a post in the organisation: a prompt that agents spawned on it
// start from. Only the agent that created a role may spawn agents on it.
type Role struct {
	ID            string
	Name          string
	Prompt        string
	InterfaceSpec *InterfaceSpec // nil when the role offers none
	CreatedBy     string
	CreatedAt     time.Time
}

func (r *Role) clone() Role {
	c := *r
	c.InterfaceSpec = r.InterfaceSpec.clone()
	return c
}

// AgentStatus is an agent's lifecycle state.
type AgentStatus string

// StatusActive is the status of an agent that takes messages.
const StatusActive AgentStatus = "active"

// Agent describes an agent instance: an agent bound to a role, working on
// one task for its parent. Root and user have no role.
type Agent struct {
	ID        string
	RoleID    string
	ParentID  string
	TaskID    string
	Brief     *TaskBrief // nil for root and user
	Status    AgentStatus
	CreatedAt time.Time
}

// Behavior drives an agent: the society calls HandleMessage once for each
// message delivered to the agent, one at a time, in arrival order.
//
// The handler acts through self, which acts as the agent and works on the
// message's task. ctx is cancelled when the society is closed and stops
// waiting; a handler that blocks should watch it. An error or a panic is
// logged and reported to the agent's parent as a status_report, and the agent
// goes on with its next message.
//
// One Behavior value may drive many agents at once, so it must be safe for
// concurrent use if it is shared.
type Behavior interface {
	HandleMessage(ctx context.Context, self *Actor, m Message) error
}

// BehaviorFunc adapts a function to a Behavior.
type BehaviorFunc func(ctx context.Context, self *Actor, m Message) error

// HandleMessage calls f.
func (f BehaviorFunc) HandleMessage(ctx context.Context, self *Actor, m Message) error {
	return f(ctx, self, m)
}

// agent is the society's private state of an agent.
type agent struct {
	info Agent // info.Brief is always nil: the brief is kept as JSON, in brief
	// brief is the agent's task brief as JSON, nil for root and user: the
	// very bytes of its store record, which the society never modifies
	// (see store.Store), so that a million idle agents do not hold their
	// briefs twice. Agent and Agents decode it.
	brief json.RawMessage
	// decoded is brief decoded, kept once the agent's own code asked for
	// it (Actor.Agent), which a behaviour may do for every message; shared
	// and never modified: each caller gets a copy. Society.Agent and
	// Agents decode without keeping it, so that listing a million idle
	// agents does not make them hold their briefs twice.
	decoded  atomic.Pointer[TaskBrief]
	order    uint64 // creation order, for listing
	role     *Role  // shared, never modified; for root and user, a stand-in named after them
	depth    int
	behavior Behavior
	box      atomic.Pointer[mailbox.Box[*Message]] // nil until the first message: idle agents need none; its messages are not changed once queued
	mind     *mind                                 // a model-driven agent's history, from its first turn
	spawnKey string                                // the spawn that made it (see turn), or ""
	reported bool                                  // it has sent its parent a status_report; guarded by s.mu
	reports  int32                                 // how many of its children have reported; guarded by s.mu
	taskAt   int                                   // its place in Society.taskAgents; guarded by s.mu
}

// roleName returns the name of a's role.
func (a *agent) roleName() string { return a.role.Name }

// spec returns the interface spec of a's role; nil when it has none.
func (a *agent) spec() *InterfaceSpec { return a.role.InterfaceSpec }

// Actor is a handle through which code acts as one agent: what it sends, the
// roles it creates and the agents it spawns are that agent's, under the rules
// every agent follows. A behaviour receives one for each message; a host gets
// one from [Society.Actor].
//
// An Actor is bound to a task: messages it sends default to that task, and
// children it spawns inherit it. It is safe for concurrent use.
type Actor struct {
	s      *Society
	a      *agent
	taskID string
	turn   *turn // the delivery being handled, for a behaviour's handle
}

// turn is one delivery of a message to a behaviour. Spawns made while
// handling it are keyed by the message and their order, so that handling the
// message again after a crash (delivery is at least once) spawns nothing
// twice: the n-th spawn returns the child the n-th spawn made before.
type turn struct {
	msgID  string
	spawns atomic.Int32
}

// id returns the id of the message t handles; "" for a nil t.
func (t *turn) id() string {
	if t == nil {
		return ""
	}
	return t.msgID
}

// spawnKey numbers the next spawn of t and returns its key; "" for a nil
// t (an Actor acting outside a delivery).
func (t *turn) spawnKey() string {
	if t == nil {
		return ""
	}
	return t.msgID + "#" + itoa(int(t.spawns.Add(1)))
}

// ID returns the id of the agent this handle acts as.
func (x *Actor) ID() string { return x.a.info.ID }

// TaskID returns the task the handle works on.
func (x *Actor) TaskID() string { return x.taskID }

// Agent returns the agent this handle acts as.
func (x *Actor) Agent() Agent {
	x.s.mu.Lock()
	info := x.a.info
	x.s.mu.Unlock()
	if x.a.brief != nil {
		b := x.a.decoded.Load()
		if b == nil {
			b = decodeBrief(x.a.brief)
			x.a.decoded.Store(b)
		}
		info.Brief = b.clone()
	}
	return info
}

// WithTask returns a handle for the same agent working on taskID.
func (x *Actor) WithTask(taskID string) *Actor {
	return &Actor{s: x.s, a: x.a, taskID: taskID, turn: x.turn}
}

// Contacts returns the agent's contact registry.
func (x *Actor) Contacts() []Contact { return x.s.contacts.List(x.a.info.ID) }

// FindRoleByName returns every role named name; see [Society.FindRoleByName].
func (x *Actor) FindRoleByName(name string) []Role { return x.s.FindRoleByName(name) }

// RoleSpec describes a role to create.
type RoleSpec struct {
	Name          string // required; unique per creator
	Prompt        string // the rolePrompt agents of the role start from
	InterfaceSpec *InterfaceSpec
}

// impersonates reports whether a role name reads, as a source line shows
// it, as user or root: spaces, invisible characters, case and full-width
// forms aside (see fold).
func impersonates(name string) bool {
	var b strings.Builder
	for _, r := range name {
		if !ignorable(r) {
			b.WriteRune(fold(r))
		}
	}
	switch b.String() {
	case UserID, RootID, "用户":
		return true
	}
	return false
}

// CreateRole creates a role owned by the agent. If the agent already created
// a role with that name, CreateRole returns it with reused true and changes
// nothing: the new spec's prompt and interface are ignored. A name that
// reads as user or root ("user", "Root", "用户") is refused with
// ErrInvalidArgument.
func (x *Actor) CreateRole(ctx context.Context, spec RoleSpec) (role Role, reused bool, err error) {
	s, by := x.s, x.a.info.ID
	if blank(spec.Name) {
		return Role{}, false, s.refuse("create_role", by, &Error{Code: ErrInvalidArgument, Message: "a role needs a name", MissingFields: []string{"name"}})
	}
	if by == UserID {
		return Role{}, false, s.refuse("create_role", by, newError(ErrForbidden, "the user endpoint does not create roles"))
	}
	if impersonates(spec.Name) {
		return Role{}, false, s.refuse("create_role", by, &Error{Code: ErrInvalidArgument, Message: "a role cannot be named " + strconvQuote(spec.Name) +
			": the source line of every message its agents send would read as one from user or root; name the role for what its agents do"})
	}
	var r *Role
	if err := s.apply(ctx, func() (*change, *Error) {
		if x.a.info.Status == StatusTerminated {
			return nil, terminatedError(x.a, x.a)
		}
		if id, ok := s.roleKeys[roleKey{by, spec.Name}]; ok {
			r, reused = s.roles[id], true
			return nil, nil
		}
		r = &Role{
			ID:            s.roleIDs.Next(),
			Name:          spec.Name,
			Prompt:        spec.Prompt,
			InterfaceSpec: spec.InterfaceSpec.clone(),
			CreatedBy:     by,
			CreatedAt:     time.Now(),
		}
		return &change{
			claims: []string{claimRole(by, spec.Name)},
			record: store.Change{Roles: []store.Role{roleRecord(r)}},
			commit: func() {
				s.addRole(r)
				s.emit(Event{Kind: EventRoleCreated, Task: x.taskID, Agent: by, Turn: x.turn.id(), Role: r.ID, Name: r.Name})
			},
		}, nil
	}); err != nil {
		return Role{}, false, s.refuse("create_role", by, err)
	}
	if !reused {
		s.log.LogAttrs(ctx, slog.LevelInfo, "role created",
			slog.String("role", r.ID), slog.String("name", r.Name), slog.String("by", by))
	}
	return r.clone(), reused, nil
}

func (s *Society) addRole(r *Role) {
	s.roles[r.ID] = r
	s.roleOrder = append(s.roleOrder, r.ID)
	s.roleKeys[roleKey{r.CreatedBy, r.Name}] = r.ID
}

// SpawnSpec describes an agent to spawn.
type SpawnSpec struct {
	RoleID string
	Brief  *TaskBrief // required and validated
	// ParentID may be left empty: the parent is always the spawning agent,
	// and a different ParentID is refused with ErrParentMismatch.
	ParentID string
	// Behavior drives the new agent. Nil means the society's Config.DefaultBehavior.
	Behavior Behavior
	// Budget, if not nil, is the child's own budget: a share of what the
	// parent has left, which the child and its descendants may not exceed
	// (see Budget). What they spend is charged to the parent's budget and
	// the task's as well. A field larger than what the parent has left is
	// refused with ErrBudgetTooLarge; a zero field is no limit of the
	// child's own. Nil means the child draws on its parent's.
	Budget *Budget
}

// SpawnAgent creates an agent on one of the spawning agent's own roles, as its
// child, working on the handle's task. The hard constraints of the
// organisation hold: the parent is the caller; an agent spawns only on roles
// it created; root has at most one child per task, and a repeated spawn for
// the same task returns that child with reused true. A refused spawn creates
// nothing and changes no registry.
//
// The child knows its parent and the brief's collaborators from birth, and
// the parent knows the child. A child driven by the model (no Behavior of
// its own, and none in Config.DefaultBehavior) is sent its brief as its
// first message: a [TaskAssignment] from the parent, accepted with the spawn,
// so that it has a turn to start working in (a reused child is not sent it
// again). A child driven by Go code reads its brief from [Actor.Agent]. Under ContactStrict a parent presets only
// agents it knows itself (and user): a collaborator outside its registry is
// refused with ErrUnknownContact.
func (x *Actor) SpawnAgent(ctx context.Context, spec SpawnSpec) (child Agent, reused bool, err error) {
	return x.spawn(ctx, spec, false)
}

// spawn is SpawnAgent. With given set, the caller gives spec.Brief to the
// society and never reads it again: a model-driven child keeps it, decoded,
// for its first turn to show (see mind.assigned), and the Agent returned
// has no Brief.
func (x *Actor) spawn(ctx context.Context, spec SpawnSpec, given bool) (child Agent, reused bool, err error) {
	s, by := x.s, x.a.info.ID
	refuse := func(e *Error) (Agent, bool, error) { return Agent{}, false, s.refuse("spawn_agent", by, e) }
	if by == UserID {
		return refuse(newError(ErrForbidden, "the user endpoint does not spawn agents"))
	}
	if spec.ParentID != "" && spec.ParentID != by {
		return refuse(&Error{Code: ErrParentMismatch, Message: "parentAgentId must be the caller, " + strconvQuote(by) + ", or be left out", AgentID: spec.ParentID})
	}
	if err := spec.Brief.Validate(); err != nil {
		return refuse(err.(*Error))
	}
	if spec.Budget != nil {
		if err := spec.Budget.check(); err != nil {
			return refuse(err)
		}
	}
	for i, c := range spec.Brief.Collaborators {
		if blank(c.AgentID) {
			return refuse(&Error{Code: ErrInvalidTaskBrief, Message: "collaborators[" + itoa(i) + "] needs an agentId", MissingFields: []string{"collaborators.agentId"}})
		}
	}
	// Encoded once, outside the lock: the child keeps these bytes and its
	// store record carries them.
	brief, jerr := json.Marshal(spec.Brief)
	if jerr != nil {
		return refuse(&Error{Code: ErrInvalidTaskBrief, Message: "the brief does not encode", Err: jerr})
	}
	// Every spawn of a turn that gets this far counts, whatever answers it,
	// so that the n-th spawn of a turn handled again is the n-th before.
	key := x.turn.spawnKey()

	var assignment *pendingSend
	var found agentView // the child an earlier spawn made, decoded once s.mu is released
	var id string       // the new child's, drawn once: apply may check again after a wait
	if err := s.apply(ctx, func() (*change, *Error) {
		c, earlier, e := s.checkSpawn(x, spec, key, brief, &id)
		if e != nil {
			return nil, e
		}
		if earlier {
			found, reused = c.view(), true
			return nil, nil
		}
		if spec.Budget != nil {
			if e := s.checkShare(x.a, x.taskID, *spec.Budget, counts{}, ""); e != nil {
				return nil, e
			}
		}
		adds := s.birthContacts(x.a, c, spec.Brief, c.info.CreatedAt)
		ch := &change{
			claims: []string{by},
			agents: 1,
			record: store.Change{Agents: []store.Agent{agentRecord(c, c.info.Status)}, Contacts: adds.recs},
			commit: func() {
				s.addAgent(c)
				s.emit(Event{Kind: EventAgentSpawned, Task: c.info.TaskID, Agent: by, Turn: x.turn.id(), Target: c.info.ID, Role: c.info.RoleID, Name: c.roleName()})
				s.progressed(by)
				s.contacts.addAll(adds)
				// What the spawn was given, rather than the brief decoded
				// again from the child's JSON.
				child = c.info
				if !given {
					child.Brief = spec.Brief.clone()
				}
				if spec.Budget != nil {
					key := "agent:" + c.info.ID
					s.ledgers[key] = &ledger{key: key, budget: *spec.Budget}
				}
			},
		}
		if spec.Budget != nil {
			ch.record.States = []store.StateEntry{ledgerEntry("agent:"+c.info.ID, *spec.Budget, counts{}, nil)}
		}
		if e := s.chargeSpawn(ch, x.a, x.taskID); e != nil {
			return nil, e
		}
		if s.modelDriven(c) {
			s.assign(ch, x.a, c, c.brief)
			if given {
				c.mind = &mind{assigned: spec.Brief}
			}
			assignment = ch.send
			assignment.cause = x.turn.id()
		}
		return ch, nil
	}); err != nil {
		return refuse(err)
	}
	if reused {
		return found.agent(), true, nil
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "agent spawned",
		slog.String("agent", child.ID), slog.String("role", child.RoleID), slog.String("parent", by), slog.String("task", child.TaskID))
	if assignment != nil {
		s.logMessage(ctx, "message accepted", assignment.msg)
	}
	return child, false, nil
}

// modelDriven reports whether a is driven by the society's model.
func (s *Society) modelDriven(a *agent) bool {
	return a.behavior == nil && s.cfg.DefaultBehavior == nil && s.cfg.Model != nil
}

// assign adds to ch, the change spawning c, the child's first message: its
// brief, as a task_assignment from its parent, so that every child has a
// turn to start in. The brief and its delivery are recorded together, so a
// crash cannot leave a child that was never told its task. Called with s.mu
// held.
func (s *Society) assign(ch *change, parent, c *agent, brief json.RawMessage) {
	p := &pendingSend{own: true, to: c, msg: &Message{
		From: parent.info.ID, To: c.info.ID, TaskID: c.info.TaskID,
		Type: TaskAssignment, Payload: brief, SentAt: c.info.CreatedAt,
	}}
	s.number(p)
	if !s.volatile {
		ch.record.Accepted = []store.Message{messageRecord(p.msg)}
	}
	ch.send = p
}

// checkSpawn checks a spawn by x against the organisation. It returns the
// existing child, with reused true, when the spawn was made before (key) or
// root already has a child for the task; else the new child, whose brief is
// brief, spec.Brief's JSON, and whose id is *id, drawn if *id is empty.
// Called with s.mu held.
func (s *Society) checkSpawn(x *Actor, spec SpawnSpec, key string, brief json.RawMessage, id *string) (*agent, bool, *Error) {
	by := x.a.info.ID
	if x.a.info.Status == StatusTerminated {
		return nil, false, terminatedError(x.a, x.a)
	}
	role := s.roles[spec.RoleID]
	if role == nil {
		return nil, false, &Error{Code: ErrRoleNotFound, Message: "no role " + strconvQuote(spec.RoleID)}
	}
	if role.CreatedBy != by {
		return nil, false, &Error{Code: ErrNotRoleOwner, Message: "role " + role.ID + " was created by " + role.CreatedBy + "; spawn only on roles you created"}
	}
	// The message was handled before a crash: the child that spawn made is
	// the answer, if the spawn asks for the same role (a model handling the
	// message again may not make the same calls).
	if id, ok := s.spawnKeys[key]; ok && key != "" && s.agents[id].info.RoleID == spec.RoleID {
		return s.agents[id], true, nil
	}
	if by == RootID {
		if id, ok := s.rootKids[x.taskID]; ok {
			return s.agents[id], true, nil
		}
	}
	for _, c := range spec.Brief.Collaborators {
		if s.agents[c.AgentID] == nil {
			return nil, false, &Error{Code: ErrAgentNotFound, Message: "collaborator " + strconvQuote(c.AgentID) + " does not exist", AgentID: c.AgentID}
		}
	}
	// Under the strict policy a preset passes on an acquaintance: the
	// parent can give only the contacts it has (user aside, whom anyone
	// may write to).
	if s.cfg.ContactPolicy == ContactStrict {
		for _, c := range spec.Brief.Collaborators {
			if id := c.AgentID; id != by && id != UserID && !s.contacts.knows(by, id) {
				return nil, false, &Error{Code: ErrUnknownContact, Message: "collaborator " + id + " is not in your contacts: you can preset only agents you know; ask a contact for an introduction first, or leave " + id + " out", AgentID: id}
			}
		}
	}
	if s.live+s.adding >= s.cfg.MaxAgents {
		return nil, false, newError(ErrTooManyAgents, "the society has its maximum of "+itoa(s.cfg.MaxAgents)+" agents")
	}
	if x.a.depth+1 > s.cfg.MaxDepth {
		return nil, false, newError(ErrMaxDepth, "a child here would be deeper than the maximum depth of "+itoa(s.cfg.MaxDepth))
	}
	if *id == "" {
		*id = s.agentIDs.Next()
	}
	return &agent{
		info: Agent{
			ID:        *id,
			RoleID:    role.ID,
			ParentID:  by,
			TaskID:    x.taskID,
			Status:    StatusActive,
			CreatedAt: time.Now(),
		},
		brief:    brief,
		role:     role,
		depth:    x.a.depth + 1,
		behavior: spec.Behavior,
		spawnKey: key,
	}, false, nil
}

// contactAdds are the contact entries a change adds: their store records,
// and for each the role its contact shows (its name and interface spec),
// which the owner's registry entry shares.
type contactAdds struct {
	recs  []store.ContactEntry
	roles []*Role
}

// add adds owner's entry for agent a, from source at the time at, and
// returns its record for the caller to complete before the next add.
func (c *contactAdds) add(owner string, a *agent, source ContactSource, at time.Time) *store.Contact {
	c.recs = append(c.recs, store.ContactEntry{Owner: owner, Contact: store.Contact{
		ID: a.info.ID, Role: a.roleName(), InterfaceSpec: marshalSpec(a.spec()), Source: string(source), AddedAt: at,
	}})
	c.roles = append(c.roles, a.role)
	return &c.recs[len(c.recs)-1].Contact
}

// reset empties c, keeping its room.
func (c *contactAdds) reset() { c.recs, c.roles = c.recs[:0], c.roles[:0] }

// birthContacts returns the entries a spawn adds: the parent to the child,
// the child to the parent, and the collaborators of the child's brief to
// the child. Called with s.mu held.
func (s *Society) birthContacts(parent, child *agent, brief *TaskBrief, now time.Time) contactAdds {
	id := child.info.ID
	n := 2 + len(brief.Collaborators)
	adds := contactAdds{recs: make([]store.ContactEntry, 0, n), roles: make([]*Role, 0, n)}
	adds.add(id, parent, SourceParent, now)
	adds.add(parent.info.ID, child, SourceChild, now)
	for _, col := range brief.Collaborators {
		if slices.ContainsFunc(adds.recs, func(e store.ContactEntry) bool { return e.Owner == id && e.Contact.ID == col.AgentID }) {
			continue // the parent, or named twice: a brief names few
		}
		target := s.agents[col.AgentID]
		rec := adds.add(id, target, SourcePreset, now)
		rec.Note = col.Description
		if col.InterfaceSpec != nil { // the caller's: the entry keeps a copy
			rec.InterfaceSpec = marshalSpec(col.InterfaceSpec)
			adds.roles[len(adds.roles)-1] = &Role{Name: target.roleName(), InterfaceSpec: col.InterfaceSpec.clone()}
		}
	}
	return adds
}

// addAgent records a new agent in memory. Called with s.mu held.
func (s *Society) addAgent(c *agent) {
	s.added++
	c.order = s.added
	s.agents[c.info.ID] = c
	s.index(c)
	s.roleAgents[c.info.RoleID]++
	if c.spawnKey != "" {
		s.spawnKeys[c.spawnKey] = c.info.ID
	}
	if c.info.Status == StatusTerminated {
		s.retireAgent(c) // restored: it counts for nothing, and is forgotten in time
		return
	}
	s.live++
	if c.info.ParentID == RootID {
		s.rootKids[c.info.TaskID] = c.info.ID
	}
}

// index adds a to the agents of its task. Called with s.mu held.
func (s *Society) index(a *agent) {
	all := s.taskAgents[a.info.TaskID]
	a.taskAt = len(all)
	s.taskAgents[a.info.TaskID] = append(all, a)
}

// unindex removes a from the agents of its task, moving the last of them
// into its place, and returns how many are left. Called with s.mu held.
func (s *Society) unindex(a *agent) int {
	task := a.info.TaskID
	all := s.taskAgents[task]
	last := all[len(all)-1]
	all[a.taskAt], last.taskAt = last, a.taskAt
	all[len(all)-1] = nil
	all = all[:len(all)-1]
	switch {
	case len(all) == 0:
		delete(s.taskAgents, task)
	case len(all) < cap(all)/4:
		s.taskAgents[task] = slices.Clone(all) // a task that shrank does not keep its peak
	default:
		s.taskAgents[task] = all
	}
	return len(all)
}

// view returns a's description for a caller to keep, its brief still
// encoded: the caller decodes it with [agentView.agent] once it has
// released s.mu. Called with s.mu held, or on an agent no other goroutine
// can change.
func (a *agent) view() agentView { return agentView{a.info, a.brief} }

// agentView is an agent's description read under s.mu, with its brief as
// the agent keeps it, in JSON. Decoding the brief takes microseconds and
// needs no lock, as an agent's brief never changes: it is done once the
// lock is released, so that reading an agent, or every agent, never holds
// up the society for it.
type agentView struct {
	info  Agent // info.Brief is nil
	brief json.RawMessage
}

// agent returns the description with its brief decoded: nil for root and
// user.
func (v agentView) agent() Agent {
	if v.brief != nil {
		v.info.Brief = decodeBrief(v.brief)
	}
	return v.info
}

// decodeBrief decodes an agent's brief, which the society encoded, or
// checked that it decodes when restoring it.
func decodeBrief(brief json.RawMessage) *TaskBrief {
	var b TaskBrief
	_ = json.Unmarshal(brief, &b)
	return &b
}

// inbox returns a's mailbox, making it on first use.
func (a *agent) inbox() *mailbox.Box[*Message] {
	if b := a.box.Load(); b != nil {
		return b
	}
	a.box.CompareAndSwap(nil, new(mailbox.Box[*Message]))
	return a.box.Load()
}
