package agentsociety

import (
	"encoding/json"
	"strings"
)

// Code names the kind of a refusal. Every error the society returns for a
// refused operation is an [*Error] whose Code is one of the constants below,
// and each constant is itself an error, so a caller tests for a kind with
// errors.Is:
//
//	if errors.Is(err, agentsociety.ErrAgentNotFound) { ... }
//
// Codes are stable strings: they are what a model sees in a failed tool
// result, and what logs record.
type Code string

// Error returns the code itself.
func (c Code) Error() string { return string(c) }

// The codes of refusals.
const (
	// ErrInvalidTaskBrief: a Task Brief lacks required fields (see MissingFields).
	ErrInvalidTaskBrief Code = "invalid_task_brief"
	// ErrInvalidMessageFormat: a payload does not fit its message type.
	ErrInvalidMessageFormat Code = "invalid_message_format"
	// ErrInvalidArgument: an argument is malformed (a blank role name, say).
	ErrInvalidArgument Code = "invalid_argument"
	// ErrAgentNotFound: a named agent does not exist.
	ErrAgentNotFound Code = "agent_not_found"
	// ErrRoleNotFound: a named role does not exist.
	ErrRoleNotFound Code = "role_not_found"
	// ErrUnknownContact: under ContactStrict, the target is not in the
	// sender's registry, or a spawn presets a collaborator the parent does
	// not know; for an introduction, the introducer does not know the agent
	// it introduces.
	ErrUnknownContact Code = "unknown_contact"
	// ErrUnsolicitedIntroduction: under ContactStrict, an
	// introduction_response would add a contact to an agent that did not
	// ask the introducer for one (directly, or through the agent it asked).
	ErrUnsolicitedIntroduction Code = "unsolicited_introduction"
	// ErrParentMismatch: spawn_agent named a parent other than the caller.
	ErrParentMismatch Code = "parent_mismatch"
	// ErrNotRoleOwner: an agent tried to spawn on a role it did not create.
	ErrNotRoleOwner Code = "not_role_owner"
	// ErrMailboxFull: the receiver already has Config.MaxQueued messages
	// waiting to be handled; the message was not sent. The society's own
	// messages and answers to collaboration requests are never refused for
	// it (see Config.MaxQueued).
	ErrMailboxFull Code = "mailbox_full"
	// ErrTooManyAgents: the society already has Config.MaxAgents live agents.
	ErrTooManyAgents Code = "too_many_agents"
	// ErrMaxDepth: the child would be deeper than Config.MaxDepth.
	ErrMaxDepth Code = "max_depth_exceeded"
	// ErrForbidden: the user endpoint tried to organise: it sends messages,
	// it does not create roles or spawn agents.
	ErrForbidden Code = "forbidden"
	// ErrUnknownRequest: a collaboration_response names no known request:
	// none was made with its id, or it was settled more than
	// Config.Retention ago and forgotten, or the agent that made it was.
	ErrUnknownRequest Code = "unknown_request"
	// ErrWrongResponder: a collaboration_response comes from an agent the
	// request was not addressed to, or goes to someone other than the requester.
	ErrWrongResponder Code = "wrong_responder"
	// ErrRequestClosed: a collaboration_response answers a request that is no
	// longer pending.
	ErrRequestClosed Code = "request_closed"
	// ErrDuplicateRequest: a collaboration_request reuses a request id.
	ErrDuplicateRequest Code = "duplicate_request_id"
	// ErrArtifactTooLarge: an artifact exceeds Config.MaxArtifactBytes.
	ErrArtifactTooLarge Code = "artifact_too_large"
	// ErrArtifactNotFound: an artifact reference names no artifact.
	ErrArtifactNotFound Code = "artifact_not_found"
	// ErrInvalidArtifactRef: a string is not an artifact reference.
	ErrInvalidArtifactRef Code = "invalid_artifact_ref"
	// ErrLoopDetected: the loop guard refused a message that would carry on
	// a loop: two agents talking with no progress, a payload sent again and
	// again, or a delegation cycle (see LoopGuard).
	ErrLoopDetected Code = "loop_detected"
	// ErrBudgetExhausted: the task's budget ran out (see Budget): no more
	// model calls are made for it.
	ErrBudgetExhausted Code = "budget_exhausted"
	// ErrBudgetTooLarge: a child's budget asks, in some field, for more than
	// its parent has left (see SpawnSpec.Budget); MissingFields names them.
	ErrBudgetTooLarge Code = "budget_too_large"
	// ErrClosed: the society is closed.
	ErrClosed Code = "society_closed"
	// ErrStore: the store failed; the operation took no effect (see Unwrap).
	ErrStore Code = "store_error"
	// ErrCanceled: the caller's context ended before the operation was
	// made; it took no effect (see Unwrap).
	ErrCanceled Code = "canceled"
	// ErrAgentTerminated: the agent was terminated, or is being terminated
	// and takes no more messages.
	ErrAgentTerminated Code = "agent_terminated"
	// ErrNotAncestor: an agent tried to terminate an agent that is not one
	// of its descendants.
	ErrNotAncestor Code = "not_ancestor"
	// ErrUnknownTool: a model called a tool that does not exist for its agent.
	ErrUnknownTool Code = "unknown_tool"
	// ErrToolFailed: a tool failed in a way that has no code of its own.
	ErrToolFailed Code = "tool_failed"
	// ErrStepLimit: a model-driven agent's turn used Config.MaxSteps model
	// calls without finishing, or its model made the same failing tool
	// call a third time.
	ErrStepLimit Code = "step_limit"
	// ErrModel: the model failed, after retries for transient failures (see
	// Unwrap; a call past Config.ModelCallTimeout wraps llm.ErrTimeout).
	ErrModel Code = "model_error"
	// ErrTruncated: a model-driven agent's model stopped at its output
	// limit, or its provider's content filter cut the reply off
	// (llm.Response.Truncated), in a reply without tool calls, so the turn
	// ended with the model's work cut off rather than finished.
	ErrTruncated Code = "model_output_truncated"
)

// Error is a refused operation. Its Code says what kind of refusal it is;
// the other fields say what was wrong, when they apply.
type Error struct {
	Code          Code
	Message       string      // human-readable detail
	MissingFields []string    // fields absent or blank, in their documented order
	MessageType   MessageType // for ErrInvalidMessageFormat
	AgentID       string      // the agent concerned, when there is one
	Err           error       // the underlying cause, for ErrStore
}

// Error returns the code followed by the detail.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if len(e.MissingFields) > 0 {
		b.WriteString(" (missing: ")
		b.WriteString(strings.Join(e.MissingFields, ", "))
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Is reports whether target is e's Code, so that errors.Is(err, ErrX) works.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

func newError(code Code, msg string) *Error {
	return &Error{Code: code, Message: msg}
}

// MarshalJSON renders e as a failed tool result, the form a model reads,
// with the field names of seed 001's Error Handling section:
//
//	{"error": "invalid_task_brief", "message": ..., "missing_fields": [...]}
//	{"error": "invalid_message_format", "message": ..., "message_type": ..., "missing_fields": [...]}
//	{"error": "agent_not_found", "message": ..., "agentId": ...}
//
// missing_fields is always present for those two codes (an empty list when
// no field is missing: the payload was malformed instead), and message_type
// always for invalid_message_format. For other codes each of these fields
// is present only when it applies; agentId names the agent concerned,
// whatever the code.
func (e *Error) MarshalJSON() ([]byte, error) {
	msg := e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	out := struct {
		Code          Code         `json:"error"`
		Message       string       `json:"message,omitempty"`
		MessageType   *MessageType `json:"message_type,omitempty"`
		MissingFields *[]string    `json:"missing_fields,omitempty"`
		AgentID       string       `json:"agentId,omitempty"`
	}{Code: e.Code, Message: msg, AgentID: e.AgentID}
	missing := e.MissingFields
	if missing == nil && (e.Code == ErrInvalidTaskBrief || e.Code == ErrInvalidMessageFormat) {
		missing = []string{}
	}
	if missing != nil {
		out.MissingFields = &missing
	}
	if e.MessageType != "" || e.Code == ErrInvalidMessageFormat {
		out.MessageType = &e.MessageType
	}
	return json.Marshal(out)
}
