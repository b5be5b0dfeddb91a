package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	as "agentsociety"
	"agentsociety/inspect"
)

// The inspector is an http.Handler: mount it on a server of your own, on a
// loopback address (it has no authentication of its own), and open it in a
// browser. Its JSON API serves scripts too: here the organisation, read
// from /api/org.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := as.New(ctx, as.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	root, err := s.Actor(as.RootID)
	if err != nil {
		fmt.Println(err)
		return
	}
	role, _, err := root.CreateRole(ctx, as.RoleSpec{Name: "lead"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, _, err := root.WithTask("task-1").SpawnAgent(ctx, as.SpawnSpec{RoleID: role.ID, Brief: &as.TaskBrief{
		Objective: "a calculator", Constraints: []string{}, Inputs: "the requirement",
		Outputs: "an artifact", CompletionCriteria: "it works",
	}}); err != nil {
		fmt.Println(err)
		return
	}

	srv := httptest.NewServer(inspect.New(s, inspect.Options{})) // listens on 127.0.0.1
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/org")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var org struct {
		Agents []struct {
			ID, Role, Parent, Status string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&org); err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range org.Agents {
		fmt.Printf("%s (%s) parent=%q %s\n", a.ID, a.Role, a.Parent, a.Status)
	}
	// Output:
	// root (root) parent="" active
	// agent-1 (lead) parent="root" active
	// user (user) parent="" active
}
