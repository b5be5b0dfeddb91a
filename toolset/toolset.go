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
// method, so a host can write tools of its own that do as much, or adapt
// these by copying them.
package toolset
