package agentsociety_test

import (
	"bytes"
	"context"
	"testing"

	as "agentsociety"

	"github.com/google/go-cmp/cmp"
)

func TestArtifactRoundTrip(t *testing.T) {
	ctx := context.Background()
	const limit = 64
	f := newSmallOrg(t, as.Config{MaxArtifactBytes: limit})
	data := []byte("<!doctype html><title>计算器</title>")
	orig := bytes.Clone(data)
	art, err := f.a.PutArtifact(ctx, as.ArtifactSpec{Name: "calculator.html", MediaType: "text/html", Data: data})
	if err != nil {
		t.Fatal(err)
	}
	data[0] = 'X' // the society keeps its own copy
	if art.ID == "" || art.Ref() != "artifact:"+art.ID || art.Size != int64(len(orig)) || art.CreatedBy != f.a.ID() ||
		art.Name != "calculator.html" || art.MediaType != "text/html" || art.CreatedAt.IsZero() {
		t.Fatalf("artifact metadata %+v", art)
	}
	if id, err := as.ParseArtifactRef(art.Ref()); err != nil || id != art.ID {
		t.Fatalf("ParseArtifactRef(%q) = %q, %v", art.Ref(), id, err)
	}
	for _, ref := range []string{art.Ref(), art.ID, " " + art.Ref() + " "} {
		for _, get := range []func(context.Context, string) (as.Artifact, []byte, error){f.s.GetArtifact, f.b.GetArtifact} {
			meta, got, err := get(ctx, ref)
			if err != nil {
				t.Fatalf("GetArtifact(%q): %v", ref, err)
			}
			if !bytes.Equal(got, orig) {
				t.Fatalf("GetArtifact(%q) = %q, want %q", ref, got, orig)
			}
			if diff := cmp.Diff(art, meta); diff != "" {
				t.Fatalf("GetArtifact(%q) metadata (-put +get):\n%s", ref, diff)
			}
			got[0] = 'Y' // nor can a reader change it
		}
	}

	// The limit is inclusive; the media type defaults.
	full, err := f.b.PutArtifact(ctx, as.ArtifactSpec{Name: "max", Data: bytes.Repeat([]byte{'z'}, limit)})
	if err != nil {
		t.Fatalf("an artifact of exactly the limit: %v", err)
	}
	if full.MediaType != "application/octet-stream" || full.Size != limit || full.CreatedBy != f.b.ID() || full.ID == art.ID {
		t.Fatalf("artifact metadata %+v", full)
	}
	_, err = f.b.PutArtifact(ctx, as.ArtifactSpec{Name: "too big", Data: bytes.Repeat([]byte{'z'}, limit+1)})
	wantCode(t, err, as.ErrArtifactTooLarge)
	// An empty artifact is an artifact.
	empty, err := f.g.PutArtifact(ctx, as.ArtifactSpec{Name: "empty"})
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := f.s.GetArtifact(ctx, empty.Ref()); err != nil || len(got) != 0 {
		t.Fatalf("empty artifact read back %q, %v", got, err)
	}
}
