package agentsociety

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	"agentsociety/internal/ids"
	"agentsociety/store"
)

// Pruning: what has ended is kept in memory for Config.Retention, then
// forgotten, so that nothing the society holds grows for its whole life.
// What ends is queued, in the order it ended, on s.retired; since the
// retention is the same for all, the queue is in the order things fall due,
// and one timer, armed for the oldest (see armPrune), prunes whatever is
// due when it fires, then arms itself for the next. Like a request's timer it is
// counted in s.wg and stopped by Close, so it never outlives the society.
//
// A task ends when the society holds none of its agents and nothing of it
// is in flight: its ledger (what it spent, see budget.go) and its activity
// (see quiet.go) are forgotten then, so that memory does not grow with the
// number of tasks ever run. A task with agents ends when the last of them
// is forgotten, Retention after it ended; one that never had any (root
// answered it alone) is queued when it goes quiet. Either is forgotten
// only once it has been quiet for Retention: one that got work meanwhile
// and went quiet again is queued again, for Retention after that, so that
// a conversation that goes on keeps its budget and what it spent. A
// message on a forgotten task starts it afresh, with the default budget.
//
// What prune forgets, the store removes too (store.Removal), so that a
// durable society's store does not grow for its life either: prune
// forgets in memory first, then records the removal, claiming what it
// removes so that a change on the same keys (a request id a model chose
// again) waits until the removal is recorded and is never removed by it.
// A store that fails to remove keeps what the society forgot, which a
// society reopened on it forgets again Config.Retention after opening:
// nothing is lost. The last agent and role ids are recorded with each
// removal, so that a society reopened on the store never numbers a new
// agent or role as one it forgot.

// retiree is something that ended: a settled request, a terminated agent
// or a task without agents, due to be forgotten at due.
type retiree struct {
	due     time.Time
	request *request
	agent   *agent
	task    string
}

// retireTask queues task, which went quiet and has no agents, to be
// forgotten Retention after it went quiet, unless it is queued already or
// has nothing to forget. Called with s.mu held.
func (s *Society) retireTask(task string) {
	if l := s.ledgers["task:"+task]; l != nil && !l.retiring && s.cfg.Retention >= 0 {
		l.retiring = true
		from := l.quiet
		if from.IsZero() {
			from = time.Now()
		}
		s.retireFrom(retiree{task: task}, from)
	}
}

// hasAgents reports whether the society holds an agent of task, the task
// of no id aside: root and the agents of no task are held under it, and
// it counts as having none. Called with s.mu held.
func (s *Society) hasAgents(task string) bool {
	return task != "" && len(s.taskAgents[task]) > 0
}

// endTask forgets task's ledger and activity if it has ended: the society
// holds none of its agents, nothing of it is in flight, and it went quiet
// Retention ago or more; one that went quiet since is queued again (see
// retireTask). Called with s.mu held.
func (s *Society) endTask(task string, f *forgetting) {
	if s.hasAgents(task) {
		return
	}
	t := s.tasks[task]
	if t != nil && t.busy > 0 {
		return // idler queues it when it goes quiet
	}
	if l := s.ledgers["task:"+task]; l != nil && time.Since(l.quiet) < s.cfg.Retention {
		s.retireTask(task) // in use lately: kept for Retention after
		return
	}
	if s.ledgers["task:"+task] != nil {
		delete(s.ledgers, "task:"+task)
		f.state(budgetScope+"task:"+task, budgetKey)
	}
	if t != nil {
		if t.saved {
			f.state(awaitingScope+task, awaitingKey)
		}
		s.dropActivity(task, t)
	}
	f.tasks = append(f.tasks, task) // its project state goes in forgetState
}

// retireRequest queues r, just settled, to be forgotten. Called with s.mu
// held.
func (s *Society) retireRequest(r *request) { s.retire(retiree{request: r}) }

// retireAgent queues a, just terminated, to be forgotten. Called with s.mu
// held.
func (s *Society) retireAgent(a *agent) { s.retire(retiree{agent: a}) }

func (s *Society) retire(e retiree) { s.retireFrom(e, time.Now()) }

// retireFrom queues e to be forgotten Retention after from, keeping the
// queue in the order things fall due. Called with s.mu held.
func (s *Society) retireFrom(e retiree, from time.Time) {
	if s.cfg.Retention < 0 {
		return
	}
	e.due = from.Add(s.cfg.Retention)
	// Mostly the last: from is now, but for a task that went quiet earlier.
	i := len(s.retired)
	for i > 0 && s.retired[i-1].due.After(e.due) {
		i--
	}
	s.retired = slices.Insert(s.retired, i, e)
	s.armPrune()
}

// pruneEvery bounds how often prune runs: at most pruneEvery times a
// Config.Retention. Each run reads all the society's requests, roles and
// loop-guard pairs once, so a society whose agents end one at a time is
// not read whole for each; what is due is forgotten up to a
// pruneEvery-th of Retention late.
const pruneEvery = 64

// armPrune starts the prune timer for the oldest retiree, unless it runs
// already, nothing is queued or the society is closed. Called with s.mu
// held: the timer is counted in s.wg until it fires or Close stops it.
func (s *Society) armPrune() {
	if s.pruneTimer != nil || len(s.retired) == 0 || s.closed.Load() {
		return
	}
	at := s.retired[0].due
	if next := s.pruned.Add(s.cfg.Retention / pruneEvery); at.Before(next) {
		at = next
	}
	s.wg.Add(1)
	s.pruneTimer = time.AfterFunc(time.Until(at), func() {
		defer s.wg.Done()
		s.prune()
	})
}

// stopPrune stops the prune timer. Called by Close with s.mu held, after
// setting closed; a timer that already fired sees closed and
// returns.
func (s *Society) stopPrune() {
	if s.pruneTimer != nil && s.pruneTimer.Stop() {
		s.wg.Done()
	}
	s.pruneTimer = nil
}

// prune forgets every retiree that is due, and what goes with a forgotten
// agent: its spawn key, its contact registry and the entries about it in
// others' (see forgetAgent), its private state, the requests it made or
// was asked (a request from an agent that ended may still be pending), and
// the roles it created that no agent remembered has; then it removes them
// from the store. It runs from the prune timer, and calls no store and no
// log handler with s.mu held.
func (s *Society) prune() {
	s.mu.Lock()
	if s.closed.Load() {
		s.pruneTimer = nil
		s.mu.Unlock()
		return
	}
	s.pruned = time.Now()
	f := s.forgetDue(s.pruned)
	// s.pruneTimer stays set until the removal is recorded: no other
	// prune starts meanwhile.
	for !f.record.Empty() && !s.closed.Load() {
		c := &change{claims: f.claims}
		if busy := s.claimed(c); busy != nil {
			// A change in flight, or checked since memory forgot, may
			// write again what the removal names: once it is
			// committed, memory holds it, and the removal leaves it.
			s.mu.Unlock()
			select {
			case <-busy:
			case <-s.done:
			}
			s.mu.Lock()
			s.keepHeld(&f.record)
			continue
		}
		done := s.claim(c)
		s.mu.Unlock()
		s.removeForgotten(f.record)
		s.mu.Lock()
		s.unclaim(c)
		close(done)
		s.wg.Done()
		break
	}
	s.pruneTimer = nil
	s.armPrune()
	s.mu.Unlock()
}

// removeBatch bounds how many records one change of prune removes, so
// that forgetting a great many things at once makes no change too big for
// a store.
const removeBatch = 256

// removeForgotten records rm, what prune forgot, with the last agent and role
// ids first when it removes agents or roles, in changes of at most removeBatch
// records each. A change that fails is logged, and ends the removal, as the
// society's closing does: the store keeps the rest, which a society reopened
// on it forgets again. Called with s.mu released.
func (s *Society) removeForgotten(rm store.Change) {
	if len(rm.Remove.Agents)+len(rm.Remove.Roles) > 0 {
		rm.States = append(rm.States, s.lastIDs()...)
	}
	parts := splitChange(rm, removeBatch)
	for i, part := range parts {
		if s.closed.Load() {
			return
		}
		if err := s.store.Apply(s.runCtx, part); err != nil {
			s.log.LogAttrs(s.runCtx, slog.LevelWarn, "removing what the society forgot from the store failed; a society reopened on the store forgets it again",
				slog.Int("changes_left", len(parts)-i), slog.String("err", err.Error()))
			return
		}
	}
}

// splitChange splits c, which only removes records and sets state, into
// changes of at most n records each, in c's order: the state entries,
// then the contact entries, requests, agents and roles removed, so that
// what names an agent or a role goes before it (a society reopened on a
// store that took only the first changes forgets the rest again).
func splitChange(c store.Change, n int) []store.Change {
	var parts []store.Change
	room := 0
	next := func() *store.Change {
		if room == 0 {
			parts = append(parts, store.Change{})
			room = n
		}
		room--
		return &parts[len(parts)-1]
	}
	for _, e := range c.States {
		p := next()
		p.States = append(p.States, e)
	}
	for _, k := range c.Remove.Contacts {
		p := next()
		p.Remove.Contacts = append(p.Remove.Contacts, k)
	}
	for _, id := range c.Remove.Requests {
		p := next()
		p.Remove.Requests = append(p.Remove.Requests, id)
	}
	for _, id := range c.Remove.Agents {
		p := next()
		p.Remove.Agents = append(p.Remove.Agents, id)
	}
	for _, id := range c.Remove.Roles {
		p := next()
		p.Remove.Roles = append(p.Remove.Roles, id)
	}
	return parts
}

// keepHeld takes out of rm, a removal prune made, what memory holds again:
// written by a change since memory forgot it. Called with s.mu held.
func (s *Society) keepHeld(rm *store.Change) {
	rm.Remove.Requests = slices.DeleteFunc(rm.Remove.Requests, func(id string) bool { return s.requests[id] != nil })
	rm.Remove.Agents = slices.DeleteFunc(rm.Remove.Agents, func(id string) bool { return s.agents[id] != nil })
	rm.Remove.Roles = slices.DeleteFunc(rm.Remove.Roles, func(id string) bool { return s.roles[id] != nil })
	rm.Remove.Contacts = slices.DeleteFunc(rm.Remove.Contacts, func(k store.ContactKey) bool { return s.contacts.knows(k.Owner, k.ID) })
	rm.States = slices.DeleteFunc(rm.States, func(e store.StateEntry) bool {
		if key, ok := strings.CutPrefix(e.Scope, budgetScope); ok {
			return s.ledgers[key] != nil
		}
		if task, ok := strings.CutPrefix(e.Scope, awaitingScope); ok {
			return s.tasks[task] != nil && s.tasks[task].saved
		}
		if id, ok := strings.CutPrefix(e.Scope, stuckScope); ok {
			return s.requests[id] != nil && s.requests[id].reported
		}
		_, ok := s.state[stateKey{e.Scope, e.Key}]
		return ok
	})
}

// forgetDue forgets every retiree due at now, and returns what the store
// holds of it. Called with s.mu held.
func (s *Society) forgetDue(now time.Time) *forgetting {
	f := new(forgetting)
	gone := map[string]bool{}
	n := 0
	for ; n < len(s.retired) && !s.retired[n].due.After(now); n++ {
		switch e := s.retired[n]; {
		case e.request != nil:
			if s.requests[e.request.id] == e.request {
				delete(s.requests, e.request.id)
				f.request(e.request)
			}
		case e.agent != nil:
			if s.forgetAgent(e.agent, f) {
				gone[e.agent.info.ID] = true
			}
		case e.task != "":
			if l := s.ledgers["task:"+e.task]; l != nil {
				l.retiring = false
			}
			s.endTask(e.task, f)
		}
	}
	clear(s.retired[:n]) // let them be collected
	s.retired = s.retired[n:]
	if len(s.retired) == 0 {
		s.retired = nil // drop the array a burst grew
	}
	if len(gone) > 0 {
		s.forgetWith(gone, f)
	}
	s.forgetState(gone, f.tasks, f)
	return f
}

// forgetState forgets the private state of the agents gone and the
// project state of the tasks ended. Called with s.mu held.
func (s *Society) forgetState(gone map[string]bool, tasks []string, f *forgetting) {
	if len(gone)+len(tasks) == 0 {
		return
	}
	ended := make(map[string]bool, len(tasks))
	for _, task := range tasks {
		ended["task:"+task] = true
	}
	for k := range s.state {
		if id, ok := strings.CutPrefix(k.scope, "agent:"); ok && gone[id] || ended[k.scope] {
			delete(s.state, k)
			f.state(k.scope, k.key)
		}
	}
}

// forgetting is what prune forgot that the store holds: the change that
// removes it, and the keys that change claims.
type forgetting struct {
	record store.Change
	claims []string
	tasks  []string // the tasks ended, whose project state is to go
}

func (f *forgetting) request(r *request) {
	f.record.Remove.Requests = append(f.record.Remove.Requests, r.id)
	f.claims = append(f.claims, claimRequest(r.id))
	if r.reported {
		f.record.States = append(f.record.States, stuckEntry(r.id, false))
	}
}

func (f *forgetting) agent(id string) {
	f.record.Remove.Agents = append(f.record.Remove.Agents, id)
	f.claims = append(f.claims, id)
}

func (f *forgetting) state(scope, key string) {
	f.record.States = append(f.record.States, store.StateEntry{Scope: scope, Key: key})
	f.claims = append(f.claims, claimState(scope, key))
}

// The store keeps the last agent and role ids the society made under this
// scope, each under its sequence's name, once it has removed an agent or
// a role: the ids of a society reopened on it go on after them.
const idsScope = "ids:"

// lastIDs returns the records of the last agent and role ids.
func (s *Society) lastIDs() []store.StateEntry {
	var out []store.StateEntry
	for key, seq := range map[string]*ids.Sequence{"agent": s.agentIDs, "role": s.roleIDs} {
		if last := seq.Last(); last != "" {
			v, _ := json.Marshal(last)
			out = append(out, store.StateEntry{Scope: idsScope, Key: key, Value: v, Writer: RootID, UpdatedAt: time.Now()})
		}
	}
	return out
}

// restoreIDs takes back a record of lastIDs, reporting whether e is one.
// Called while the society opens.
func (s *Society) restoreIDs(e store.StateEntry) bool {
	if e.Scope != idsScope {
		return false
	}
	var last string
	if json.Unmarshal(e.Value, &last) == nil {
		// A sequence observes only its own ids.
		s.agentIDs.Observe(last)
		s.roleIDs.Observe(last)
	}
	return true
}

// forgetAgent forgets a, if the society still has it, and its spawn key
// and contact registry, and reports whether it did. It removes the entries
// about a from the registries of its parent, root, user and the agents a
// knew, which are most who know it; another agent that knew a without a
// knowing it keeps its entry. Called with s.mu held.
func (s *Society) forgetAgent(a *agent, f *forgetting) bool {
	id := a.info.ID
	if s.agents[id] != a {
		return false
	}
	delete(s.agents, id)
	if a.spawnKey != "" && s.spawnKeys[a.spawnKey] == id {
		delete(s.spawnKeys, a.spawnKey)
	}
	if s.rootKids[a.info.TaskID] == id {
		delete(s.rootKids, a.info.TaskID)
	}
	if s.roleAgents[a.info.RoleID]--; s.roleAgents[a.info.RoleID] <= 0 {
		delete(s.roleAgents, a.info.RoleID)
	}
	f.agent(id)
	knew := append(s.contacts.ids(id, ""), a.info.ParentID, RootID, UserID)
	slices.Sort(knew)
	for _, o := range s.contacts.forget(id, slices.Compact(knew)) {
		f.record.Remove.Contacts = append(f.record.Remove.Contacts, store.ContactKey{Owner: o, ID: id})
	}
	if task := a.info.TaskID; s.unindex(a) == 0 && task != "" {
		s.endTask(task, f)
	}
	return true
}

// forgetWith forgets what goes with the agents gone: their budgets, the
// requests they made or were asked, and the roles whose creator the
// society no longer has and that no agent it has is on. A pending request
// to an agent gone from an agent still there stays, for settleRequestsTo
// to settle: its requester must be told. Called with s.mu held.
func (s *Society) forgetWith(gone map[string]bool, f *forgetting) {
	s.forgetLoops(gone)
	for id := range gone {
		if s.ledgers["agent:"+id] != nil {
			delete(s.ledgers, "agent:"+id)
			f.state(budgetScope+"agent:"+id, budgetKey)
		}
	}
	for id, r := range s.requests {
		if gone[r.from] || (gone[r.to] && r.status != StatusPending) {
			s.stopTimer(r)
			delete(s.requests, id)
			f.request(r)
		}
	}
	var orphans map[string]bool
	for id, r := range s.roles {
		if s.agents[r.CreatedBy] == nil && s.roleAgents[id] == 0 {
			if orphans == nil {
				orphans = map[string]bool{}
			}
			orphans[id] = true
		}
	}
	if orphans == nil {
		return
	}
	for id := range orphans {
		r := s.roles[id]
		delete(s.roles, id)
		f.record.Remove.Roles = append(f.record.Remove.Roles, id)
		f.claims = append(f.claims, claimRole(r.CreatedBy, r.Name))
		if s.roleKeys[roleKey{r.CreatedBy, r.Name}] == id {
			delete(s.roleKeys, roleKey{r.CreatedBy, r.Name})
		}
	}
	s.roleOrder = slices.DeleteFunc(s.roleOrder, func(id string) bool { return orphans[id] })
}
