package agentsociety

// Held returns how many records of each kind the society holds in memory,
// by the name of the field that holds them, so that a test can check that
// nothing grows for the life of the society.
func (s *Society) Held() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contacts.mu.Lock()
	defer s.contacts.mu.Unlock()
	return map[string]int{
		"agents":    len(s.agents),
		"roles":     len(s.roles),
		"roleKeys":  len(s.roleKeys),
		"roleOrder": len(s.roleOrder),
		"rootKids":  len(s.rootKids),
		"spawnKeys": len(s.spawnKeys),
		"requests":  len(s.requests),
		"state":     len(s.state),
		"claims":    len(s.claims),
		"contacts":  len(s.contacts.owners),
		"retired":   len(s.retired),
	}
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
