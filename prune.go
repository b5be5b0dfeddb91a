package agentsociety

import (
	"slices"
	"strings"
	"time"
)

// Pruning: what has ended is kept in memory for Config.Retention, then
// forgotten, so that nothing the society holds grows for its whole life.
// What ends is queued, in the order it ended, on s.retired; since the
// retention is the same for all, the queue is in the order things fall due,
// and one timer, armed for the oldest, prunes whatever is due when it
// fires, then arms itself for the next. Like a request's timer it is
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
// The store is not told: store.Store has no way to delete a request or an
// agent, so it keeps them, and a society reopened on it forgets them again
// Config.Retention after opening.

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

// endTask forgets task's ledger and activity if it has ended: the society
// holds none of its agents, nothing of it is in flight, and it went quiet
// Retention ago or more; one that went quiet since is queued again (see
// retireTask). Called with s.mu held.
func (s *Society) endTask(task string) {
	if s.taskAgents[task] > 0 {
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
	delete(s.ledgers, "task:"+task)
	if t != nil {
		s.dropActivity(task, t)
	}
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

// armPrune starts the prune timer for the oldest retiree, unless it runs
// already, nothing is queued or the society is closed. Called with s.mu
// held: the timer is counted in s.wg until it fires or Close stops it.
func (s *Society) armPrune() {
	if s.pruneTimer != nil || len(s.retired) == 0 || s.closed.Load() {
		return
	}
	s.wg.Add(1)
	s.pruneTimer = time.AfterFunc(time.Until(s.retired[0].due), func() {
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
// agent: its spawn key, its contact registry, its private state, the
// requests it made or was asked (a request from an agent that ended may
// still be pending), and the roles it created that no agent remembered
// has. It runs from the prune timer, takes s.mu and calls no store and no
// log handler.
func (s *Society) prune() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneTimer = nil
	if s.closed.Load() {
		return
	}
	now := time.Now()
	gone := map[string]bool{}
	n := 0
	for ; n < len(s.retired) && !s.retired[n].due.After(now); n++ {
		switch e := s.retired[n]; {
		case e.request != nil:
			if s.requests[e.request.id] == e.request {
				delete(s.requests, e.request.id)
			}
		case e.agent != nil:
			if s.forgetAgent(e.agent) {
				gone[e.agent.info.ID] = true
			}
		case e.task != "":
			if l := s.ledgers["task:"+e.task]; l != nil {
				l.retiring = false
			}
			s.endTask(e.task)
		}
	}
	clear(s.retired[:n]) // let them be collected
	s.retired = s.retired[n:]
	if len(s.retired) == 0 {
		s.retired = nil // drop the array a burst grew
	}
	if len(gone) > 0 {
		s.forgetWith(gone)
	}
	s.armPrune()
}

// forgetAgent forgets a, if the society still has it, and its spawn key
// and contact registry, and reports whether it did. Called with s.mu held.
func (s *Society) forgetAgent(a *agent) bool {
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
	s.contacts.forget(id)
	if task := a.info.TaskID; task != "" {
		if s.taskAgents[task]--; s.taskAgents[task] <= 0 {
			delete(s.taskAgents, task)
			s.endTask(task)
		}
	}
	return true
}

// forgetWith forgets what goes with the agents gone: the requests they
// made or were asked, their private state, and the roles whose creator
// the society no longer has and that no agent it has is on. A pending request to an agent gone from
// an agent still there stays, for settleRequestsTo to settle: its
// requester must be told. Called with s.mu held.
func (s *Society) forgetWith(gone map[string]bool) {
	s.forgetLoops(gone)
	for id := range gone {
		delete(s.ledgers, "agent:"+id)
	}
	for id, r := range s.requests {
		if gone[r.from] || (gone[r.to] && r.status != StatusPending) {
			s.stopTimer(r)
			delete(s.requests, id)
		}
	}
	for k := range s.state {
		if id, ok := strings.CutPrefix(k.scope, "agent:"); ok && gone[id] {
			delete(s.state, k)
		}
	}
	var orphans map[string]bool
	for id, r := range s.roles {
		if s.agents[r.CreatedBy] == nil {
			if orphans == nil {
				orphans = map[string]bool{}
			}
			orphans[id] = true
		}
	}
	if orphans == nil {
		return
	}
	for _, a := range s.agents {
		delete(orphans, a.info.RoleID)
	}
	for id := range orphans {
		r := s.roles[id]
		delete(s.roles, id)
		if s.roleKeys[roleKey{r.CreatedBy, r.Name}] == id {
			delete(s.roleKeys, roleKey{r.CreatedBy, r.Name})
		}
	}
	s.roleOrder = slices.DeleteFunc(s.roleOrder, func(id string) bool { return orphans[id] })
}
