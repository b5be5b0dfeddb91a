package toolset

import (
	"context"
	"encoding/json"
	"strings"

	as "agentsociety"
)

// State returns seed 004's state tools: state_get and state_set, over
// [agentsociety.Actor.GetState] and [agentsociety.Actor.SetState]. Scope
// project is the state every agent of the caller's task shares (the task's
// specification, checklist, progress); scope private, the caller's own.
// Every value records its writer.
//
// Give them to the roles that need them. Each call returns new Tools, which
// the caller may change.
func State() []as.Tool {
	return []as.Tool{
		strict(as.NewTool("state_get",
			"读取状态：scope=project 为本任务所有智能体共享的状态（需求规格、清单、进度），scope=private 为你自己的。",
			json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"scope":{"type":"string","enum":["project","private"]}},"required":["key"]}`),
			stateGet)),
		strict(as.NewTool("state_set",
			"写入状态（任意 JSON 值；null 删除该键），会记录写入者。scope 同 state_get。",
			json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"},"value":{"description":"任意 JSON 值"},"scope":{"type":"string","enum":["project","private"]}},"required":["key","value"]}`),
			stateSet)),
	}
}

type stateGetArgs struct {
	Key   string        `json:"key"`
	Scope as.StateScope `json:"scope"`
}

func stateGet(_ context.Context, x *as.Actor, a stateGetArgs) (any, error) {
	if strings.TrimSpace(a.Key) == "" {
		return nil, missing("state_get", "key")
	}
	v, ok, err := x.GetState(a.Key, a.Scope)
	if err != nil {
		return nil, err
	}
	if !ok {
		return map[string]any{"key": a.Key, "found": false}, nil
	}
	return map[string]any{"key": a.Key, "found": true, "value": v.Value, "writer": v.Writer, "updated_at": v.UpdatedAt}, nil
}

type stateSetArgs struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"` // absent: empty; null: "null"
	Scope as.StateScope   `json:"scope"`
}

func stateSet(ctx context.Context, x *as.Actor, a stateSetArgs) (any, error) {
	if len(a.Value) == 0 {
		return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "state_set needs a value; pass null to delete the key", MissingFields: []string{"value"}}
	}
	var value any = a.Value
	if string(a.Value) == "null" {
		value = nil
	}
	if err := x.SetState(ctx, a.Key, value, a.Scope); err != nil {
		return nil, err
	}
	return map[string]any{"key": a.Key, "ok": true}, nil
}
