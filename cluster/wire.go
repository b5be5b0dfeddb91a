package cluster

import (
	"context"
	"errors"
	"fmt"

	as "agentsociety"
	"agentsociety/llm"
)

// wireError is an error sent between nodes, keeping what errors.Is tests
// on it: an *as.Error's fields, or the kind of model failure.
type wireError struct {
	Code          as.Code        `json:",omitempty"`
	Message       string         `json:",omitempty"`
	MissingFields []string       `json:",omitempty"`
	MessageType   as.MessageType `json:",omitempty"`
	AgentID       string         `json:",omitempty"`
	Kind          string         `json:",omitempty"` // one of kinds' names
	Text          string         // err.Error()
}

// kinds are the sentinels a wireError keeps.
var kinds = []struct {
	name string
	err  error
}{
	{"rate_limited", llm.ErrRateLimited},
	{"server", llm.ErrServer},
	{"timeout", llm.ErrTimeout},
	{"bad_request", llm.ErrBadRequest},
	{"auth", llm.ErrAuth},
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
	{"unknown_outcome", ErrUnknownOutcome},
}

func toWire(err error) *wireError {
	w := &wireError{Text: err.Error()}
	var e *as.Error
	if errors.As(err, &e) {
		w.Code, w.Message, w.MissingFields, w.MessageType, w.AgentID = e.Code, e.Message, e.MissingFields, e.MessageType, e.AgentID
		if e.Err != nil {
			w.Message += ": " + e.Err.Error()
		}
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			w.Kind = k.name
			break
		}
	}
	return w
}

// err returns the error w stands for.
func (w *wireError) err() error {
	var cause error
	for _, k := range kinds {
		if k.name == w.Kind {
			cause = k.err
		}
	}
	if w.Code != "" {
		return &as.Error{Code: w.Code, Message: w.Message, MissingFields: w.MissingFields, MessageType: w.MessageType, AgentID: w.AgentID, Err: cause}
	}
	if cause == context.DeadlineExceeded || cause == context.Canceled {
		// The node's own deadline or its closing: to the caller, a
		// model timeout worth retrying.
		cause = llm.ErrTimeout
	}
	if cause == ErrUnknownOutcome {
		return &textError{text: w.Text, err: cause} // w.Text names it already
	}
	if cause != nil {
		return fmt.Errorf("%w: %s", cause, w.Text)
	}
	return errors.New(w.Text)
}

// textError is an error whose text is text, wrapping err.
type textError struct {
	text string
	err  error
}

func (e *textError) Error() string { return e.text }
func (e *textError) Unwrap() error { return e.err }
