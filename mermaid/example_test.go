package mermaid_test

import (
	"os"

	as "agentsociety"
	"agentsociety/mermaid"
)

// Example draws a small organisation. OrgOf reads one from a society.
func Example() {
	org := mermaid.Org{
		Roles: []as.Role{
			{ID: "role-1", Name: "lead", CreatedBy: as.RootID},
			{ID: "role-2", Name: "developer", CreatedBy: "agent-1"},
		},
		Agents: []as.Agent{
			{ID: "agent-1", RoleID: "role-1", ParentID: as.RootID},
			{ID: "agent-2", RoleID: "role-2", ParentID: "agent-1"},
		},
	}
	mermaid.WriteFlowchart(os.Stdout, org)
	// Output:
	// flowchart TD
	//   classDef role fill:#f5f0ff,stroke:#7b61c4
	//   classDef terminated stroke-dasharray:4 3,color:#888
	//   root(("root"))
	//   r1{{"role: lead"}}:::role
	//   r2{{"role: developer"}}:::role
	//   a1["agent-1<br>lead"]
	//   a2["agent-2<br>developer"]
	//   root --> a1
	//   a1 --> a2
	//   root -. creates .-> r1
	//   a1 -. creates .-> r2
}
