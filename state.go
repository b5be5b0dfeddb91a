package agentsociety

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"agentsociety/store"
)

// StateScope says whose a state key is (seed 004).
type StateScope string

const (
	// ScopeProject is the state every agent of a task shares: the task's
	// specification, its checklist, its progress.
	ScopeProject StateScope = "project"
	// ScopePrivate is an agent's own state, invisible to other agents.
	ScopePrivate StateScope = "private"
)

// StateValue is a state key's value with who wrote it and when.
type StateValue struct {
	Value     json.RawMessage
	Writer    string
	UpdatedAt time.Time
}

// stateKey names a key in a scope: "task:<id>" or "agent:<id>".
type stateKey struct{ scope, key string }

// GetState reads key in scope: the project state of the handle's task, or
// the agent's private state. ok is false when the key is not set.
func (x *Actor) GetState(key string, scope StateScope) (v StateValue, ok bool, err error) {
	sk, err := x.stateScope(scope)
	if err != nil {
		return StateValue{}, false, err
	}
	x.s.mu.Lock()
	defer x.s.mu.Unlock()
	v, ok = x.s.state[stateKey{sk, key}]
	v.Value = append(json.RawMessage(nil), v.Value...)
	return v, ok, nil
}

// SetState sets key in scope to value, encoded as JSON (a json.RawMessage is
// taken as it is, and must be valid). An untyped nil deletes the key; a
// typed nil pointer is stored as JSON null.
func (x *Actor) SetState(ctx context.Context, key string, value any, scope StateScope) error {
	s, by := x.s, x.ID()
	sk, err := x.stateScope(scope)
	if err != nil {
		return err
	}
	if blank(key) {
		return s.refuse("state_set", by, &Error{Code: ErrInvalidArgument, Message: "a state key must not be blank", MissingFields: []string{"key"}})
	}
	var raw json.RawMessage
	switch v := value.(type) {
	case nil:
	case json.RawMessage:
		if !json.Valid(v) {
			return s.refuse("state_set", by, newError(ErrInvalidArgument, "the value is not valid JSON"))
		}
		raw = append(json.RawMessage(nil), v...)
	default:
		if raw, err = marshal(v); err != nil {
			return s.refuse("state_set", by, newError(ErrInvalidArgument, "the value does not encode as JSON: "+err.Error()))
		}
	}
	now := time.Now()
	sk2 := stateKey{sk, key}
	if err := s.apply(ctx, func() (*change, *Error) {
		if x.a.info.Status == StatusTerminated {
			return nil, terminatedError(x.a, x.a)
		}
		v := StateValue{Value: raw, Writer: by, UpdatedAt: now}
		return &change{
			claims: []string{claimState(sk, key)},
			record: store.Change{States: []store.StateEntry{stateRecord(sk2, v)}},
			commit: func() {
				s.putState(sk2, v)
				s.progressed(x.a.info.ID)
				s.emit(Event{Kind: EventStateSet, Task: x.taskID, Agent: by, Turn: x.turn.id(), Name: key, Detail: sk})
			},
		}, nil
	}); err != nil {
		return s.refuse("state_set", by, err)
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "state set", slog.String("scope", sk), slog.String("key", key), slog.String("by", by))
	return nil
}

// putState sets key k to v in memory; an empty value deletes k. Called with
// s.mu held.
func (s *Society) putState(k stateKey, v StateValue) {
	if len(v.Value) == 0 {
		delete(s.state, k)
		return
	}
	s.state[k] = v
}

func (x *Actor) stateScope(scope StateScope) (string, error) {
	switch scope {
	case ScopeProject, "":
		return "task:" + x.taskID, nil
	case ScopePrivate:
		return "agent:" + x.ID(), nil
	}
	return "", x.s.refuse("state", x.ID(), newError(ErrInvalidArgument, `scope must be "project" or "private", not `+strconvQuote(string(scope))))
}
