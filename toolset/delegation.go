package toolset

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	as "agentsociety"
)

// Delegation returns seed 004's delegation tools: delegate_task,
// complete_task and fail_task. They are collaboration requests under other
// names ([agentsociety.Actor.RequestCollaboration] and
// [agentsociety.Actor.Respond]), so a delegated task has the states of a
// request (pending, then completed, error, rejected or timeout) and the
// delegator is told of each outcome by a collaboration_response: completion
// with the result, failure with its message and details, or the timeout.
//
// Give them to the roles that delegate and to those that carry out the
// delegated tasks. Each call returns new Tools, which the caller may change.
func Delegation() []as.Tool {
	return []as.Tool{
		strict(as.NewTool("delegate_task",
			"把一项任务委托给某智能体：立即返回 task_id（pending）；对方完成、失败或超时后，你会收到 collaboration_response。",
			json.RawMessage(`{"type":"object","properties":{"assignee":{"type":"string"},"description":{"type":"string"},"payload":{"type":"object","description":"任务所需数据"},"timeout_seconds":{"type":"number"}},"required":["assignee","description"]}`),
			delegate)),
		strict(as.NewTool("complete_task",
			"完成委托给你的任务，把结果交回委托人。",
			json.RawMessage(`{"type":"object","properties":{"task_id":{"type":"string"},"result":{"type":"object"}},"required":["task_id","result"]}`),
			complete)),
		strict(as.NewTool("fail_task",
			"无法完成委托给你的任务时使用：说明原因与细节，委托人会收到并可升级处理。",
			json.RawMessage(`{"type":"object","properties":{"task_id":{"type":"string"},"error_message":{"type":"string"},"details":{"type":"object"}},"required":["task_id","error_message"]}`),
			fail)),
	}
}

type delegateArgs struct {
	Assignee       string          `json:"assignee"`
	Description    string          `json:"description"`
	Payload        json.RawMessage `json:"payload"`
	TimeoutSeconds *float64        `json:"timeout_seconds"`
}

func delegate(ctx context.Context, x *as.Actor, a delegateArgs) (any, error) {
	if names := blanks("assignee", a.Assignee, "description", a.Description); names != nil {
		return nil, missing("delegate_task", names...)
	}
	t, err := timeout(a.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	id, err := x.RequestCollaboration(ctx, a.Assignee, as.CollaborationRequestPayload{SubtaskDescription: a.Description, Context: a.Payload}, t)
	if err != nil {
		return nil, err
	}
	return map[string]any{"task_id": id, "status": as.StatusPending}, nil
}

type completeArgs struct {
	TaskID string          `json:"task_id"`
	Result json.RawMessage `json:"result"`
}

func complete(ctx context.Context, x *as.Actor, a completeArgs) (any, error) {
	names := blanks("task_id", a.TaskID)
	if len(a.Result) == 0 || string(a.Result) == "null" {
		names = append(names, "result")
	}
	if names != nil {
		return nil, missing("complete_task", names...)
	}
	if _, err := x.Respond(ctx, a.TaskID, as.CollaborationResponsePayload{Status: as.StatusCompleted, ResultData: a.Result}); err != nil {
		return nil, err
	}
	return map[string]any{"task_id": a.TaskID, "status": as.StatusCompleted}, nil
}

type failArgs struct {
	TaskID       string          `json:"task_id"`
	ErrorMessage string          `json:"error_message"`
	Details      json.RawMessage `json:"details"`
}

func fail(ctx context.Context, x *as.Actor, a failArgs) (any, error) {
	if names := blanks("task_id", a.TaskID, "error_message", a.ErrorMessage); names != nil {
		return nil, missing("fail_task", names...)
	}
	if _, err := x.Respond(ctx, a.TaskID, as.CollaborationResponsePayload{Status: as.StatusError, ErrorMessage: a.ErrorMessage, ResultData: a.Details}); err != nil {
		return nil, err
	}
	return map[string]any{"task_id": a.TaskID, "status": as.StatusError}, nil
}

// blanks returns the names, of the name, value pairs given, whose values
// are blank.
func blanks(pairs ...string) []string {
	var names []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.TrimSpace(pairs[i+1]) == "" {
			names = append(names, pairs[i])
		}
	}
	return names
}

// timeout reads an optional timeout_seconds as the built-in
// request_collaboration does: absent means none, and a value given must be
// positive and at most agentsociety.MaxTimeoutSeconds, as in a
// collaboration_request's payload.
func timeout(secs *float64) (time.Duration, error) {
	if secs == nil {
		return 0, nil
	}
	if !(*secs > 0 && *secs <= float64(as.MaxTimeoutSeconds)) {
		return 0, &as.Error{Code: as.ErrInvalidArgument, Message: "timeout_seconds, when given, must be a positive number of seconds, at most " +
			strconv.FormatInt(as.MaxTimeoutSeconds, 10) + " (about 292 years); leave it out for no timeout"}
	}
	return max(time.Duration(*secs*float64(time.Second)), 1), nil
}
