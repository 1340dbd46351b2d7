package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/floodgate/floodgate/internal/door/ratelimit"
	"github.com/floodgate/floodgate/internal/door/ratelimit/rls"
	"github.com/floodgate/floodgate/internal/doors"
)

// TestFloodgateReadsEveryRecipesLimits: applying a recipe's kustomization after manifests/ is all
// it takes on Floodgate's side. Each recipe ships its limits (envoyproxy/ratelimit's YAML) as a
// ConfigMap of its own in Floodgate's namespace, and Floodgate's Deployment projects every one of
// them, optionally (the base runs without any), into the directory rls.config names, mounted whole
// and read-only (the kubelet updates only whole mounts). The files of all recipes together load as
// the kubelet lays them out (through ..data): no two share a file name (one would hide the other)
// or a domain (Floodgate refuses a second definition); the empty directory of a base without any
// recipe loads too, and serves no domain.
func TestFloodgateReadsEveryRecipesLimits(t *testing.T) {
	b, err := load(readFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	fd := named[*appsv1.Deployment](b, "floodgate")
	if fd == nil {
		t.Fatal("no Deployment floodgate")
	}
	floodgateYAML := named[*corev1.ConfigMap](b, "floodgate-config").Data["floodgate.yaml"]
	cfg, _, err := floodgateConfig(floodgateYAML)
	if err != nil {
		t.Fatal(err)
	}
	dir := cfg.RLS.Config
	if dir == "" {
		t.Fatal("Floodgate's configuration sets no rls.config: the rate limit service serves no limits")
	}
	spec := &fd.Spec.Template.Spec
	fc := &spec.Containers[0]
	var mount *corev1.VolumeMount
	for i := range fc.VolumeMounts {
		if vm := &fc.VolumeMounts[i]; vm.MountPath == dir {
			mount = vm
		} else if strings.HasPrefix(dir, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			t.Errorf("rls.config %s lies inside the mount of %s at %s: a mount point inside a read-only volume", dir, vm.Name, vm.MountPath)
		}
	}
	if mount == nil {
		t.Fatalf("rls.config is %s, but the floodgate container mounts nothing there", dir)
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" || !mount.ReadOnly {
		t.Errorf("%s: mount it whole (the kubelet updates only whole mounts) and read-only", dir)
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 || spec.Volumes[i].Projected == nil {
		t.Fatalf("%s is not a projected volume of the recipes' ConfigMaps", dir)
	}
	projected := map[string]bool{}
	for _, s := range spec.Volumes[i].Projected.Sources {
		switch {
		case s.ConfigMap == nil:
			t.Errorf("%s projects something other than a ConfigMap", dir)
		case s.ConfigMap.Optional == nil || !*s.ConfigMap.Optional:
			t.Errorf("ConfigMap %s is required: Floodgate would not start without its recipe", s.ConfigMap.Name)
		case len(s.ConfigMap.Items) > 0:
			t.Errorf("ConfigMap %s is projected in part: a key left out is a domain never served", s.ConfigMap.Name)
		default:
			projected[s.ConfigMap.Name] = true
		}
	}

	// The recipes' limits: the ConfigMaps of the kustomizations beside manifests/ itself.
	mounted := t.TempDir()
	data := filepath.Join(mounted, "..data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	recipes := 0
	var names []string
	sources := map[string][]byte{}
	for f, objs := range b.files {
		for _, o := range objs {
			cm, ok := o.(*corev1.ConfigMap)
			if !ok || filepath.Dir(f) == "." {
				continue
			}
			recipes++
			if cm.Namespace != fd.Namespace || !projected[cm.Name] {
				t.Errorf("%s: ConfigMap %s/%s is not among the ConfigMaps Floodgate's pods (namespace %s) project into %s", f, cm.Namespace, cm.Name, fd.Namespace, dir)
			}
			for key, content := range cm.Data {
				if !strings.HasSuffix(key, ".yaml") {
					t.Errorf("%s: key %s: envoyproxy/ratelimit and Floodgate read only *.yaml files", f, key)
				}
				if _, dup := sources[key]; dup {
					t.Errorf("%s: file %s is another recipe's too: one would hide the other", f, key)
				}
				names = append(names, key)
				sources[key] = []byte(content)
				os.WriteFile(filepath.Join(data, key), []byte(content), 0o644)
				os.Symlink(filepath.Join("..data", key), filepath.Join(mounted, key))
			}
		}
	}
	if recipes < 3 {
		t.Fatalf("found %d recipes' limits, want Istio's, Contour's and Emissary's", recipes)
	}
	want, err := rls.Parse(names, sources)
	if err != nil {
		t.Fatalf("the recipes' limits together: %v", err)
	}
	for _, dirNow := range []string{mounted, t.TempDir()} {
		c, _, err := floodgateConfig(strings.ReplaceAll(floodgateYAML, dir, dirNow))
		if err != nil {
			t.Fatal(err)
		}
		if err := doors.ReadFiles(c); err != nil {
			t.Fatalf("%s: %v", dirNow, err)
		}
		got := ratelimit.Limits(c).Domains()
		slices.Sort(got)
		if dirNow == mounted {
			w := want.Domains()
			slices.Sort(w)
			if !slices.Equal(got, w) || len(got) != recipes {
				t.Errorf("the mounted ConfigMaps serve domains %v, want %v, one per recipe", got, w)
			}
		} else if len(got) != 0 {
			t.Errorf("an empty directory serves domains %v", got)
		}
	}
}
