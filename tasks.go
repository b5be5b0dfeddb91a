package agentsociety

import (
	"slices"
	"strings"
)

// TaskState is what a task is doing, as Society.Tasks reports it.
type TaskState string

// The states of a task.
const (
	// TaskRunning: some of its messages are queued or being handled, or a
	// request of it waits for its timeout.
	TaskRunning TaskState = "running"
	// TaskWaiting: nothing of it is in flight, and its lead has not
	// reported to user: it waits for a message.
	TaskWaiting TaskState = "waiting"
	// TaskStuck: it went quiet with the user's last message unanswered,
	// and user was told (see StatusQuiet); until user writes to it again.
	TaskStuck TaskState = "stuck"
	// TaskDone: nothing of it is in flight and its lead has reported to
	// user.
	TaskDone TaskState = "done"
	// TaskOutOfBudget: its budget ran out (see Budget).
	TaskOutOfBudget TaskState = "out_of_budget"
)

// TaskInfo is a task as Society.Tasks reports it.
type TaskInfo struct {
	ID    string
	Lead  string // root's child for the task, "" when it has none
	State TaskState
	Usage Usage
}

// Tasks returns the tasks the society knows, ordered by id: those root
// has a lead for, and those that sent or spent anything since the society
// opened.
func (s *Society) Tasks() []TaskInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := map[string]bool{}
	for task := range s.rootKids {
		ids[task] = true
	}
	for task := range s.tasks {
		ids[task] = true
	}
	for key := range s.ledgers {
		if task, ok := strings.CutPrefix(key, "task:"); ok {
			ids[task] = true
		}
	}
	out := make([]TaskInfo, 0, len(ids))
	for task := range ids {
		if task == "" {
			continue
		}
		info := TaskInfo{ID: task, Lead: s.rootKids[task], State: TaskWaiting}
		l := s.taskLedger(task)
		info.Usage = l.spent.usage()
		info.Usage.Budget, info.Usage.Left = l.budget, l.left()
		t := s.tasks[task]
		lead := s.agents[info.Lead]
		switch {
		case (&ledger{budget: l.budget, spent: l.spent}).exhausted() != "": // spent, not in flight
			info.State = TaskOutOfBudget
		case t != nil && t.busy > 0:
			info.State = TaskRunning
		case t != nil && t.stuck:
			info.State = TaskStuck
		case lead != nil && lead.reported:
			info.State = TaskDone
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b TaskInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}
