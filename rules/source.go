package rules

import "sync"

// Source is a rules file the agent reloads when it changes. A reload that
// fails keeps the last good rules, so a bad edit never takes resources
// away. A Source is safe for concurrent use.
type Source struct {
	nameOrPath string

	mu      sync.Mutex
	current *RuleSet
}

// NewSource loads a rules file (a builtin name or a path, as Load takes;
// "" means Default) and returns a Source that can reload it. It fails when
// the first load fails: there is no last good rule set yet.
func NewSource(nameOrPath string) (*Source, error) {
	s := &Source{nameOrPath: nameOrPath}
	if nameOrPath == "" {
		s.current = Default()
		return s, nil
	}
	rs, err := Load(nameOrPath)
	if err != nil {
		return nil, err
	}
	s.current = rs
	return s, nil
}

// Path returns the builtin name or path the Source loads ("" for Default).
func (s *Source) Path() string { return s.nameOrPath }

// Current returns the last rule set that loaded.
func (s *Source) Current() *RuleSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

// Reload loads the file again. When it is valid, the new rule set becomes
// current and is returned. When it is not, Reload returns the last good rule
// set together with the errors, and the current rule set stays as it was.
func (s *Source) Reload() (*RuleSet, error) {
	if s.nameOrPath == "" {
		return s.Current(), nil
	}
	rs, err := Load(s.nameOrPath)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		return s.current, err
	}
	s.current = rs
	return rs, nil
}
