package manifests

import (
	"fmt"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// renderRoot is where render lays the files out in its in-memory file system.
const renderRoot = "/manifests"

// render builds the kustomization in dir as `kubectl apply -k` does, with kustomize's own
// library (krusty, which kubectl embeds), from files (manifests/ as readFiles reads it, so that a
// broken copy renders as the shipped one would), and decodes every object it would send strictly
// into its API type (decodeObject).
func render(files map[string][]byte, dir string) ([]metav1.Object, error) {
	mem := filesys.MakeFsInMemory()
	for name, data := range files {
		if err := mem.WriteFile(path.Join(renderRoot, name), data); err != nil {
			return nil, err
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(mem, path.Join(renderRoot, dir))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []metav1.Object
	for _, r := range m.Resources() {
		at := fmt.Sprintf("kustomize build %s: %s %s/%s", dir, r.GetKind(), r.GetNamespace(), r.GetName())
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		js, err := yaml.YAMLToJSONStrict(y)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		obj, err := decodeObject(js, at)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kustomize build %s: no objects", dir)
	}
	return out, nil
}

// renderAll renders several kustomizations, as applied one after the other: a later object of
// the same kind, namespace and name replaces an earlier one.
func renderAll(files map[string][]byte, dirs ...string) ([]metav1.Object, error) {
	var out []metav1.Object
	for _, d := range dirs {
		objs, err := render(files, d)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			key := func(x metav1.Object) string {
				return fmt.Sprintf("%T %s/%s", x, x.GetNamespace(), x.GetName())
			}
			if i := slices.IndexFunc(out, func(x metav1.Object) bool { return key(x) == key(o) }); i >= 0 {
				out[i] = o
			} else {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// TestEveryKustomizationRenders: each directory with a kustomization.yaml builds with kustomize
// itself, and every object it would apply decodes strictly. (A file can decode on its own and still
// fail to build: kustomize refuses, for instance, a number as a map key.)
func TestEveryKustomizationRenders(t *testing.T) {
	// renderedApart are the kustomizations the bundle of the other tests
	// leaves out, checked by tests of their own (istio_http_test.go,
	// gatewayratelimit_test.go).
	renderedApart := []string{"istio/http", "gateway-ratelimit"}
	var found []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			found = append(found, filepath.ToSlash(filepath.Dir(p)))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	all := append(slices.Clone(dirs), renderedApart...)
	want := slices.Clone(all)
	slices.Sort(want)
	if !slices.Equal(found, want) {
		t.Fatalf("kustomizations on disk %v, tested %v: add the new one to dirs", found, want)
	}
	files := readFiles(t)
	maps.Copy(files, readYAMLDirs(t, renderedApart...))
	for _, dir := range all {
		objs, err := render(files, dir)
		if err != nil {
			t.Error(err)
			continue
		}
		var kinds []string
		for _, o := range objs {
			kinds = append(kinds, fmt.Sprintf("%T", o))
		}
		t.Logf("%s: %d objects: %s", dir, len(objs), strings.Join(kinds, " "))
	}
}
