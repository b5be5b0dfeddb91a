package natsstore

// Rounds returns how many rounds of writes the group commit has sent.
func (s *Store) Rounds() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.round
}
