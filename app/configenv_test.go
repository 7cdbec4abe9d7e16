package app

import (
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// yamlLeaves lists the dotted names of the leaves of a YAML mapping.
func yamlLeaves(m map[string]any, prefix string, out *[]string) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			yamlLeaves(sub, prefix+k+".", out)
			continue
		}
		*out = append(*out, prefix+k)
	}
}

// TestEveryYAMLSettingHasItsVariable: the settings `config print` writes
// and the variables EnvVars lists are the same set, named by the rule,
// without two settings sharing a name.
func TestEveryYAMLSettingHasItsVariable(t *testing.T) {
	b, err := yaml.Marshal(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var leaves []string
	yamlLeaves(m, "", &leaves)
	sort.Strings(leaves)

	seen := map[string]string{}
	var settings []string
	for _, v := range EnvVars() {
		if other, dup := seen[v.Name]; dup {
			t.Errorf("%s names both %s and %s", v.Name, other, v.Setting)
		}
		seen[v.Name] = v.Setting
		if v.Alias {
			continue
		}
		settings = append(settings, v.Setting)
		if want := "LMOS_HUB_" + strings.ToUpper(strings.ReplaceAll(v.Setting, ".", "_")); v.Name != want {
			t.Errorf("%s: variable %s, want %s", v.Setting, v.Name, want)
		}
	}
	sort.Strings(settings)
	if strings.Join(settings, " ") != strings.Join(leaves, " ") {
		t.Errorf("variables for\n%v\nbut the YAML settings are\n%v", settings, leaves)
	}
	for _, n := range clientEnv {
		if s, dup := seen[n]; dup {
			t.Errorf("%s is a client variable and the variable of %s", n, s)
		}
	}
	if len(leaves) < 60 {
		t.Errorf("only %d settings found: the walk missed nested ones?", len(leaves))
	}
}

func TestUnknownEnvVars(t *testing.T) {
	got := UnknownEnvVars([]string{"PATH=/bin", "LMOS_HUB_URL=x", "LMOS_HUB_DATA_DIR=d", "LMOS_HUB_REGISTRY_MAXTHINGS=1",
		"LMOS_HUB_REGISTRY_MAX_THINGS=2", "LMOS_HUB_FROB=1"})
	want := []UnknownEnv{{Name: "LMOS_HUB_FROB"}, {Name: "LMOS_HUB_REGISTRY_MAX_THINGS", Like: "LMOS_HUB_REGISTRY_MAXTHINGS"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("UnknownEnvVars = %+v, want %+v", got, want)
	}
}
