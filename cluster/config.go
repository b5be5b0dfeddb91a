package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// cfgKey is the key of the cluster's settings in the bucket <cluster>_cfg.
const cfgKey = "cfg"

// setting is one setting the nodes of a cluster must agree on.
type setting struct {
	Name  string
	Value string
}

// settings returns the settings of opts that every node of a cluster must
// share, in the order they are compared.
func settings(opts Options) []setting {
	c := opts.Config
	set := func(b bool) string { return fmt.Sprint(b) }
	var tools []string
	for _, t := range c.Tools {
		tools = append(tools, "leader:"+t.Name+":"+digest([]byte(t.Description), t.Parameters, []byte(strings.Join(t.Roles, ","))))
	}
	for _, t := range opts.Tools {
		tools = append(tools, "node:"+t.Name+":"+digest([]byte(t.Description), t.Parameters, []byte(strings.Join(t.Roles, ","))))
	}
	slices.Sort(tools)
	model := "none"
	if c.Model != nil {
		model = fmt.Sprintf("%T", c.Model)
		if named, ok := c.Model.(interface{ Name() string }); ok {
			model += " " + named.Name()
		}
	}
	return []setting{
		{"LeaseTTL", opts.LeaseTTL.String()},
		{"ContactPolicy", fmt.Sprint(c.ContactPolicy)},
		{"MaxAgents", fmt.Sprint(c.MaxAgents)},
		{"MaxDepth", fmt.Sprint(c.MaxDepth)},
		{"MaxQueued", fmt.Sprint(c.MaxQueued)},
		{"TaskBudget", fmt.Sprintf("%+v", c.TaskBudget)},
		{"StuckAfter", c.StuckAfter.String()},
		{"LoopGuard", fmt.Sprintf("%+v", c.LoopGuard)},
		{"EventRetention", fmt.Sprint(c.EventRetention)},
		{"MaxArtifactBytes", fmt.Sprint(c.MaxArtifactBytes)},
		{"Retention", c.Retention.String()},
		{"Model", model},
		{"MaxSteps", fmt.Sprint(c.MaxSteps)},
		{"MaxModelCalls", fmt.Sprint(c.MaxModelCalls)},
		{"ModelCallTimeout", c.ModelCallTimeout.String()},
		{"ModelRetries", fmt.Sprint(c.ModelRetries)},
		{"RetryBackoff", c.RetryBackoff.String()},
		{"HistoryBudget", fmt.Sprint(c.HistoryBudget)},
		{"Summarize", set(c.Summarize != nil)},
		{"Language", fmt.Sprint(c.Language)},
		{"Prompts", promptsDigest(c.Prompts)},
		{"Tools", strings.Join(tools, " ")},
		{"Root", set(c.Root != nil)},
		{"DefaultBehavior", set(c.DefaultBehavior != nil)},
		{"RestoreBehavior", set(c.RestoreBehavior != nil)},
		{"UserInbox", fmt.Sprint(c.UserInbox)},
	}
}

func digest(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// promptsDigest hashes every file of a Prompts override; "embedded" when
// there is none.
func promptsDigest(fsys fs.FS) string {
	if fsys == nil {
		return "embedded"
	}
	var parts [][]byte
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		parts = append(parts, []byte(path), data)
		return err
	})
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return digest(parts...)
}

// checkConfig writes the node's settings as the cluster's if it is the
// first node, and otherwise refuses settings that differ from the
// cluster's, naming the first that does.
func (n *Node) checkConfig(ctx context.Context) error {
	kv, err := keyValue(ctx, n.js, jetstream.KeyValueConfig{
		Bucket: n.names.cfg, History: 1, Storage: n.opts.Storage, Replicas: n.opts.Replicas,
		Description: "agentsociety: the settings every node of cluster " + n.opts.Cluster + " shares",
	})
	if err != nil {
		return fmt.Errorf("cluster: the configuration bucket: %w", err)
	}
	mine := settings(n.opts)
	data, err := json.Marshal(mine)
	if err != nil {
		return err
	}
	if _, err := kv.Create(ctx, cfgKey, data); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("cluster: writing the cluster's configuration: %w", err)
	}
	e, err := kv.Get(ctx, cfgKey)
	if err != nil {
		return fmt.Errorf("cluster: reading the cluster's configuration: %w", err)
	}
	var theirs []setting
	if err := json.Unmarshal(e.Value(), &theirs); err != nil {
		return fmt.Errorf("cluster: reading the cluster's configuration: %w", err)
	}
	for _, s := range mine {
		i := slices.IndexFunc(theirs, func(t setting) bool { return t.Name == s.Name })
		switch {
		case i < 0:
			return fmt.Errorf("%w: %s is %q on node %s, and the cluster %s has no such setting", ErrIncompatible, s.Name, s.Value, n.opts.NodeID, n.opts.Cluster)
		case theirs[i].Value != s.Value:
			return fmt.Errorf("%w: %s is %q on node %s and %q in cluster %s", ErrIncompatible, s.Name, s.Value, n.opts.NodeID, theirs[i].Value, n.opts.Cluster)
		}
	}
	return nil
}
