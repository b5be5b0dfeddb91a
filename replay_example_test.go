package agentsociety_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	as "agentsociety"
	"agentsociety/internal/demo"
	"agentsociety/llm"
)

// A run recorded with llm.Record is replayed on a fresh society with
// llm.Replay, without the model: the same organisation and the same page,
// under new ids. llm.Fork, with the counts agentsociety.ModelCallsUpTo
// takes from the recorded run's events, would instead replay up to an
// event and let a live model go on.
func Example_replay() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(m llm.Model) (org []string, page string) {
		s, err := as.New(ctx, as.Config{Model: m, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
		defer s.Close(ctx)
		task, err := s.SubmitRequirement(ctx, demo.Requirement)
		if err != nil {
			panic(err)
		}
		reply, err := s.WaitForUserMessage(ctx, func(m as.Message) bool {
			return m.TaskID == task && strings.Contains(m.Text(), as.ArtifactRefPrefix)
		})
		if err != nil {
			panic(err)
		}
		for _, a := range s.Agents() {
			r, _ := s.Role(a.RoleID)
			org = append(org, r.Name)
		}
		for e, err := range s.Events(ctx, 1) {
			if err != nil {
				panic(err)
			}
			if e.Kind == as.EventArtifactStored && strings.Contains(reply.Text(), e.Artifact) {
				_, data, err := s.GetArtifact(ctx, e.Artifact)
				if err != nil {
					panic(err)
				}
				page = string(data)
			}
		}
		return org, page
	}

	var recording bytes.Buffer
	org, page := run(llm.Record(demo.Model(), &recording))
	fmt.Println("recorded:", org)

	rec, err := llm.ReadRecording(&recording)
	if err != nil {
		panic(err)
	}
	replay := llm.Replay(rec)
	replayedOrg, replayedPage := run(replay)
	fmt.Println("replayed:", replayedOrg)
	fmt.Println("calls replayed:", replay.Replayed() == rec.Len(), "same page:", replayedPage == page)
	// Output:
	// recorded: [lead tester developer]
	// replayed: [lead tester developer]
	// calls replayed: true same page: true
}
