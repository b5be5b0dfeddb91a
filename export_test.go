package agentsociety

// Held returns how many records of each kind the society holds in memory,
// by the name of the field that holds them, so that a test can check that
// nothing grows for the life of the society.
func (s *Society) Held() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contacts.mu.Lock()
	defer s.contacts.mu.Unlock()
	indexed, misplaced, foreign := 0, 0, 0
	for _, in := range s.taskAgents {
		indexed += len(in)
		for i, a := range in {
			if a.taskAt != i {
				misplaced++
			}
		}
	}
	for _, t := range s.tasks {
		foreign += len(t.foreign)
	}
	return map[string]int{
		"agents":    len(s.agents),
		"indexed":   indexed,   // agents in taskAgents: every one but user
		"misplaced": misplaced, // agents whose taskAt is not where they are: none
		"foreign":   foreign,
		"roles":     len(s.roles),
		"roleKeys":  len(s.roleKeys),
		"roleOrder": len(s.roleOrder),
		"rootKids":  len(s.rootKids),
		"spawnKeys": len(s.spawnKeys),
		"requests":  len(s.requests),
		"state":     len(s.state),
		"claims":    len(s.claims),
		"contacts":  len(s.contacts.owners),
		"entries":   s.contacts.entries(),
		"retired":   len(s.retired),
		"ledgers":   len(s.ledgers),
		"taskKeys":  len(s.taskAgents),
		"roleUsers": len(s.roleAgents),
	}
}

// entries counts the entries of every registry. Called with r.mu held.
func (r *ContactRegistry) entries() int {
	n := 0
	for _, l := range r.owners {
		n += l.Len()
	}
	return n
}

// FormatIn renders m as an agent of a society in language lang reads it,
// with the sender's role name given, as FormatMessage does for Chinese.
func FormatIn(lang Language, m Message, senderRole string) string {
	l, err := loadLanguage(lang, nil)
	if err != nil {
		panic(err)
	}
	return l.formatMessage(m, senderRole, true)
}

// Quiet reports whether nothing can happen in the society until the host
// acts: no agent, user included, has a message queued or being handled,
// and no pending request has a timeout that could still fire. A test that
// waits for it waits for the society to finish what it can do, by
// condition rather than by sleeping.
func (s *Society) Quiet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.agents {
		if b := a.box.Load(); b != nil && b.Busy() {
			return false
		}
	}
	if b := s.user.self.box.Load(); b != nil && b.Busy() {
		return false
	}
	for _, r := range s.requests {
		if r.status == StatusPending && r.timer != nil && !r.watch { // a watch answers nothing
			return false
		}
	}
	// A task that went quiet awaited by user is kept until it is reported
	// (see quiet.go).
	for _, t := range s.tasks {
		if t.busy > 0 || t.awaiting && t.modelled {
			return false
		}
	}
	return true
}

// StallWatched reports whether the watchdog's timer of task is armed.
func (s *Society) StallWatched(task string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[task]
	return t != nil && t.watch != nil
}

// CompatForms and CompatFrom expose what fold and hasLookAlikeMark rely
// on.
func CompatForms() map[rune]rune { return compatForms }

const CompatFrom = compatFrom

// WaitingFor returns how many agents task waits for, found as the watchdog
// finds those that hold its messages (stalled) and as the report of a
// quiet task finds those that have not reported (unreported).
func (s *Society) WaitingFor(task string) (stalled, unreported int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tasks[task]; t != nil {
		stalled = len(s.stalledAgents(task, t))
	}
	return stalled, len(s.unreported(task))
}
