package app

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// EnvPrefix starts every environment variable of the hub's settings.
const EnvPrefix = "LMOS_HUB_"

// clientEnv are the LMOS_HUB_* variables that are not settings: the
// configuration file, and the hub and token the client commands use.
var clientEnv = []string{"LMOS_HUB_CONFIG", "LMOS_HUB_URL", "LMOS_HUB_TOKEN"}

// An EnvVar is one setting's environment variable.
type EnvVar struct {
	Name    string // e.g. LMOS_HUB_REGISTRY_MAXTHINGS
	Setting string // the YAML name, e.g. registry.maxThings
	Flag    string // the serve flag of the same setting, "" for none
	// Alias marks the short name a flag's setting had before every
	// setting had a variable (LMOS_HUB_DATA_DIR); it is still read.
	Alias bool
}

// envSetting is a leaf of Config: its dotted YAML name and its field.
type envSetting struct {
	path  string
	index []int
	typ   reflect.Type
}

// envName is the variable of a setting: LMOS_HUB_ and its YAML name with
// the dots as underscores, upper-cased (registry.maxThings →
// LMOS_HUB_REGISTRY_MAXTHINGS).
func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// envSettings lists every setting of Config, in the order of its fields,
// from the yaml tags: a setting added to Config has its variable.
func envSettings() []envSetting {
	var out []envSetting
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			path := prefix + name
			idx := append(append([]int{}, index...), i)
			if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
				walk(f.Type, path+".", idx)
				continue
			}
			out = append(out, envSetting{path: path, index: idx, typ: f.Type})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}

// EnvVars lists every setting's environment variable, then the short
// names still read for the settings that have a flag.
func EnvVars() []EnvVar {
	flags := map[string]string{}
	for _, s := range serveSettings {
		flags[s.path] = "--" + s.flag
	}
	var out []EnvVar
	for _, s := range envSettings() {
		out = append(out, EnvVar{Name: envName(s.path), Setting: s.path, Flag: flags[s.path]})
	}
	for _, s := range serveSettings {
		if s.env != envName(s.path) {
			out = append(out, EnvVar{Name: s.env, Setting: s.path, Flag: "--" + s.flag, Alias: true})
		}
	}
	return out
}

// applyEnv sets cfg from the settings' variables, then from the short
// names of the flags' settings (which win), and returns which variable
// set each setting. A value that does not parse is an error naming its
// variable.
func applyEnv(cfg *Config, getenv func(string) string) (map[string]string, error) {
	from := map[string]string{}
	var errs []error
	root := reflect.ValueOf(cfg).Elem()
	for _, s := range envSettings() {
		name := envName(s.path)
		v := getenv(name)
		if v == "" {
			continue
		}
		if err := setFromEnv(root.FieldByIndex(s.index), v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s (%s): %w", name, s.path, err))
			continue
		}
		from[s.path] = name
	}
	for i := range serveSettings {
		s := &serveSettings[i]
		v := getenv(s.env)
		if v == "" || s.env == envName(s.path) {
			continue
		}
		if err := s.set(cfg, v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s: %w", s.env, err))
			continue
		}
		from[s.path] = s.env
	}
	return from, errors.Join(errs...)
}

// setFromEnv parses v into the setting field: a string as is, a list
// comma-separated, a duration in Go syntax ("30s", "7d"), numbers and
// booleans as Go writes them.
func setFromEnv(field reflect.Value, v string) error {
	v = strings.TrimSpace(v)
	if u, ok := field.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(v))
	}
	switch field.Kind() {
	case reflect.String:
		field.SetString(v)
	case reflect.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not a boolean (use true or false)", v)
		}
		field.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(v, 10, field.Type().Bits())
		if err != nil {
			return fmt.Errorf("%q is not a whole number", v)
		}
		field.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		field.SetFloat(f)
	case reflect.Slice:
		list := []string{}
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		field.Set(reflect.ValueOf(list))
	default:
		return fmt.Errorf("a %s setting has no environment form", field.Type())
	}
	return nil
}

// An UnknownEnv is an LMOS_HUB_* variable that is no setting's.
type UnknownEnv struct {
	Name string
	// Like is the variable it probably means ("" when none): the same
	// letters but for underscores and case.
	Like string
}

// UnknownEnvVars returns the LMOS_HUB_* variables in environ (as
// os.Environ gives it) that the hub does not read, sorted: the hub warns
// about each instead of ignoring a misspelt setting silently.
func UnknownEnvVars(environ []string) []UnknownEnv {
	known := map[string]bool{}
	squash := func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "_", "")) }
	like := map[string]string{}
	for _, n := range clientEnv {
		known[n] = true
	}
	for _, v := range EnvVars() {
		known[v.Name] = true
		if !v.Alias {
			like[squash(v.Name)] = v.Name
		}
	}
	var out []UnknownEnv
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(strings.ToUpper(name), EnvPrefix) && !known[name] {
			out = append(out, UnknownEnv{Name: name, Like: like[squash(name)]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// nameEnvErrors rewrites each validation error of a setting an
// environment variable set so that it names the variable.
func nameEnvErrors(err error, from map[string]string) error {
	if err == nil || len(from) == 0 {
		return err
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for i, e := range errs {
		msg := e.Error()
		for path, name := range from {
			if strings.HasPrefix(msg, path+":") || strings.HasPrefix(msg, path+"[") {
				errs[i] = fmt.Errorf("environment variable %s: %w", name, e)
				break
			}
		}
	}
	return errors.Join(errs...)
}
