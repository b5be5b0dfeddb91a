package store_test

import (
	"context"
	"fmt"

	"agentsociety/store"
)

// A Memory records changes and loads them back; a society does this
// through its Config.Store.
func ExampleMemory() {
	ctx := context.Background()
	st := store.NewMemory()
	err := st.Apply(ctx, store.Change{
		Roles:    []store.Role{{ID: "role-1", Name: "writer", CreatedBy: "root"}},
		Agents:   []store.Agent{{ID: "agent-1", RoleID: "role-1", ParentID: "root", TaskID: "task-1", Status: "active"}},
		Contacts: []store.ContactEntry{{Owner: "agent-1", Contact: store.Contact{ID: "root", Role: "root", Source: "parent"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	state, err := st.Load(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(state.Agents[0].ID, "on", state.Roles[0].Name, "knows", state.Contacts["agent-1"][0].ID)
	// Output: agent-1 on writer knows root
}

// A Removal removes what a society forgot: here an agent, which takes its
// contact registry and its history with it, the entry about it in root's
// registry, and the role it was on.
func ExampleRemoval() {
	ctx := context.Background()
	st := store.NewMemory()
	if err := st.Apply(ctx, store.Change{
		Roles:     []store.Role{{ID: "role-1", Name: "writer", CreatedBy: "root"}},
		Agents:    []store.Agent{{ID: "agent-1", RoleID: "role-1", ParentID: "root", Status: "terminated"}},
		Contacts:  []store.ContactEntry{{Owner: "agent-1", Contact: store.Contact{ID: "root"}}, {Owner: "root", Contact: store.Contact{ID: "agent-1"}}, {Owner: "root", Contact: store.Contact{ID: "user"}}},
		Histories: []store.History{{AgentID: "agent-1", Summary: "wrote a poem"}},
	}); err != nil {
		fmt.Println(err)
		return
	}
	if err := st.Apply(ctx, store.Change{Remove: store.Removal{
		Agents:   []string{"agent-1"},
		Roles:    []string{"role-1"},
		Contacts: []store.ContactKey{{Owner: "root", ID: "agent-1"}},
	}}); err != nil {
		fmt.Println(err)
		return
	}
	state, _ := st.Load(ctx)
	fmt.Println(len(state.Agents), len(state.Roles), len(state.Histories), len(state.Contacts["agent-1"]), state.Contacts["root"][0].ID)
	// Output: 0 0 0 0 user
}
