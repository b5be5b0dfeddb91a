// Package toolset provides ready-made sets of tools for the model-driven
// agents of an [agentsociety.Society]: seed 004's delegation tools
// ([Delegation]: delegate_task, complete_task, fail_task) and its state tools
// ([State]: state_get, state_set).
//
// The tools are not built into the society, so that agents which neither
// delegate nor share state do not carry their descriptions in every prompt.
// They are host tools ([agentsociety.Tool]) like any other: a host adds them
// to Config.Tools, limited with Tool.Roles to the roles that need them:
//
//	tools := append(toolset.Delegation(), toolset.State()...)
//	for i := range tools {
//		tools[i].Roles = []string{"academic_partner", "literature_agent"}
//	}
//	cfg.Tools = append(cfg.Tools, tools...)
//
// The package uses nothing but the exported API of package agentsociety:
// each tool is an [agentsociety.NewTool] over an [agentsociety.Actor]
// method, which refuses keys its schema does not declare and names the
// arguments it lacks, so a host can write tools of its own that do as
// much, or adapt these by copying them.
package toolset

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	as "agentsociety"
)

// strict returns t, whose Handler decodes as [agentsociety.NewTool] does,
// with a Handler that first refuses a key its Parameters do not declare,
// listing those they do: a misspelt argument ("to" for "assignee",
// "timeout" for "timeout_seconds") must not be dropped, leaving the call
// to fail on an empty value or to go ahead without it. end_turn, which
// every tool takes, is let through.
func strict(t as.Tool) as.Tool {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(t.Parameters, &schema) != nil || schema.Properties == nil {
		return t // declares nothing to check against
	}
	names := slices.Sorted(maps.Keys(schema.Properties))
	handle := t.Handler
	t.Handler = func(ctx context.Context, self *as.Actor, args json.RawMessage) (any, error) {
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) == nil {
			for _, k := range slices.Sorted(maps.Keys(obj)) {
				if _, ok := schema.Properties[k]; !ok && k != "end_turn" {
					return nil, &as.Error{Code: as.ErrInvalidArgument, Message: "unknown argument " + strconv.Quote(k) + " for " + t.Name + ". The arguments are: " + strings.Join(names, ", ") + "."}
				}
			}
		}
		return handle(ctx, self, args)
	}
	return t
}

// missing refuses a call of tool without the arguments names, which it
// requires.
func missing(tool string, names ...string) error {
	return &as.Error{Code: as.ErrInvalidArgument, Message: tool + " needs the arguments " + strings.Join(names, ", "), MissingFields: names}
}
