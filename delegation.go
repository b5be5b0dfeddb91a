package agentsociety

import (
	"context"
	"encoding/json"
)

// DelegationTools returns seed 004's delegation tools for model-driven
// agents: delegate_task, complete_task and fail_task. They are collaboration
// requests under other names, so a delegated task has the states of a
// request (pending, then completed, error, rejected or timeout) and the
// delegator is told of each outcome by a collaboration_response: completion
// with the result, failure with its message and details, or the timeout.
//
// They are not built in, so as not to lengthen every agent's prompt: give
// them to the roles that delegate and those that carry out, e.g.
//
//	tools := agentsociety.DelegationTools()
//	for i := range tools {
//		tools[i].Roles = []string{"academic_partner", "literature_agent"}
//	}
//	cfg.Tools = append(cfg.Tools, tools...)
func DelegationTools() []Tool {
	return []Tool{
		{
			Name:        "delegate_task",
			Description: "把一项任务委托给某智能体：立即返回 task_id（pending）；对方完成、失败或超时后，你会收到 collaboration_response。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"assignee":{"type":"string"},"description":{"type":"string"},"payload":{"type":"object","description":"任务所需数据"},"timeout_seconds":{"type":"number"}},"required":["assignee","description"]}`),
			Handler:     toolDelegate,
		},
		{
			Name:        "complete_task",
			Description: "完成委托给你的任务，把结果交回委托人。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"task_id":{"type":"string"},"result":{"type":"object"}},"required":["task_id","result"]}`),
			Handler:     toolComplete,
		},
		{
			Name:        "fail_task",
			Description: "无法完成委托给你的任务时使用：说明原因与细节，委托人会收到并可升级处理。",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"task_id":{"type":"string"},"error_message":{"type":"string"},"details":{"type":"object"}},"required":["task_id","error_message"]}`),
			Handler:     toolFail,
		},
	}
}

func toolDelegate(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		Assignee       string          `json:"assignee"`
		Description    string          `json:"description"`
		Payload        json.RawMessage `json:"payload"`
		TimeoutSeconds *float64        `json:"timeout_seconds"`
	}
	if err := decodeArgs("delegate_task", args, &a); err != nil {
		return nil, err
	}
	timeout, err := toolTimeout(a.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	id, err := x.RequestCollaboration(ctx, a.Assignee, CollaborationRequestPayload{SubtaskDescription: a.Description, Context: a.Payload}, timeout)
	if err != nil {
		return nil, err
	}
	return map[string]any{"task_id": id, "status": StatusPending}, nil
}

func toolComplete(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		TaskID string          `json:"task_id"`
		Result json.RawMessage `json:"result"`
	}
	if err := decodeArgs("complete_task", args, &a); err != nil {
		return nil, err
	}
	if _, err := x.Respond(ctx, a.TaskID, CollaborationResponsePayload{Status: StatusCompleted, ResultData: a.Result}); err != nil {
		return nil, err
	}
	return map[string]any{"task_id": a.TaskID, "status": StatusCompleted}, nil
}

func toolFail(ctx context.Context, x *Actor, args json.RawMessage) (any, error) {
	var a struct {
		TaskID       string          `json:"task_id"`
		ErrorMessage string          `json:"error_message"`
		Details      json.RawMessage `json:"details"`
	}
	if err := decodeArgs("fail_task", args, &a); err != nil {
		return nil, err
	}
	if _, err := x.Respond(ctx, a.TaskID, CollaborationResponsePayload{Status: StatusError, ErrorMessage: a.ErrorMessage, ResultData: a.Details}); err != nil {
		return nil, err
	}
	return map[string]any{"task_id": a.TaskID, "status": StatusError}, nil
}
