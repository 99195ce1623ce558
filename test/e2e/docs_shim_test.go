package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/test/manifests/render"
)

// The kubectl and helm that TestDocsCommands puts on PATH: this test
// binary, run with docsShimEnv naming the tool (TestMain dispatches).
//
//   - kubectl is the real kubectl (the harness's component) against the
//     harness's kube-apiserver, with two differences: commands that change
//     objects run as server-side dry runs (--dry-run=server), so one doc's
//     install does not get in the way of the next; and `kubectl run`,
//     which needs a kubelet to start the pod, runs the image's entry point
//     (the Dockerfile's, featureplug) with the pod's arguments and
//     environment on the fake node standing for the pod's node.
//   - helm renders the chart with helm's own library and values parser
//     (--set, --set-string, --set-file, -f), as helm install, upgrade and
//     template do, and applies the objects with kubectl as a server-side
//     dry run; a chart that does not render fails as helm does.
const (
	docsShimEnv = "FEATUREPLUG_DOCS_SHIM"
	// docsKubectlEnv is the real kubectl.
	docsKubectlEnv = "FEATUREPLUG_DOCS_KUBECTL"
	// docsAgentEnv is the featureplug binary the image would hold.
	docsAgentEnv = "FEATUREPLUG_DOCS_AGENT"
	// docsRootEnv is the product repository root (the Dockerfile).
	docsRootEnv = "FEATUREPLUG_DOCS_ROOT"
	// docsFakeNodesEnv maps node names to the fake nodes standing for
	// their GPUs: "gpu-node-1=dgx-a100,...".
	docsFakeNodesEnv = "FEATUREPLUG_DOCS_FAKE_NODES"
)

// docsShim runs the tool docsShimEnv names and returns its exit code.
func docsShim() int {
	var err error
	switch tool := os.Getenv(docsShimEnv); tool {
	case "kubectl":
		err = docsKubectl(os.Args[1:])
	case "helm":
		err = docsHelm(os.Args[1:])
	default:
		err = fmt.Errorf("unknown tool %q", tool)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "Error:", err)
	return 1
}

// docsMutatingVerbs are the kubectl verbs that change objects.
var docsMutatingVerbs = []string{"apply", "create", "delete", "replace", "patch", "label", "annotate", "cordon", "uncordon", "drain", "scale"}

// docsKubectl is the documentation's kubectl.
func docsKubectl(args []string) error {
	verb := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-n" || a == "--namespace" || a == "--context" || a == "--kubeconfig" {
			i++
			continue
		}
		if !strings.HasPrefix(a, "-") {
			verb = a
			break
		}
	}
	switch {
	case verb == "run":
		return docsKubectlRun(args)
	case slices.Contains(docsMutatingVerbs, verb):
		args = append(args, "--dry-run=server")
	}
	return docsExec(os.Getenv(docsKubectlEnv), args, nil, nil)
}

// docsExec runs a program with the shim's standard streams (or stdin).
func docsExec(path string, args []string, env []string, stdin []byte) error {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return cmd.Run()
}

// docsKubectlRun runs `kubectl run NAME --image=IMAGE [flags] -- ARGS` as
// the pod would: the image's entry point with ARGS and the pod's
// environment, on the fake node of spec.nodeName in --overrides.
func docsKubectlRun(args []string) error {
	var image, node string
	var env, podArgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			podArgs = args[i+1:]
			break
		}
		name, value, hasValue := strings.Cut(a, "=")
		if !hasValue && (name == "--image" || name == "--env" || name == "--overrides") && i+1 < len(args) {
			i++
			value = args[i]
		}
		switch name {
		case "--image":
			image = value
		case "--env":
			env = append(env, value)
		case "--overrides":
			var pod struct {
				Spec struct{ NodeName string } `json:"spec"`
			}
			if err := json.Unmarshal([]byte(value), &pod); err != nil {
				return fmt.Errorf("kubectl run: --overrides is not JSON: %w (%s)", err, value)
			}
			node = pod.Spec.NodeName
		}
	}
	if !strings.Contains(image, "featureplug") {
		return fmt.Errorf("kubectl run: --image %q is not a featureplug image", image)
	}
	entry, err := docsEntryPoint()
	if err != nil {
		return err
	}
	fake, ok := docsFakeNodes()[node]
	if !ok {
		return fmt.Errorf("kubectl run: no fake node stands for node %q (overrides spec.nodeName)", node)
	}
	// The fake node stands for the node's GPUs, which NVML would show the
	// pod through the NVIDIA runtime.
	if len(podArgs) > 0 && (podArgs[0] == "discover" || podArgs[0] == "rules" && len(podArgs) > 1 && podArgs[1] == "explain") {
		podArgs = append(podArgs, "--fake-node", fake)
	}
	if filepath.Base(entry) != "featureplug" {
		return fmt.Errorf("kubectl run: the image's entry point is %s, not featureplug", entry)
	}
	return docsExec(os.Getenv(docsAgentEnv), podArgs, env, nil)
}

// docsEntryPoint reads the Dockerfile's ENTRYPOINT (its exec form).
func docsEntryPoint() (string, error) {
	data, err := os.ReadFile(filepath.Join(os.Getenv(docsRootEnv), "Dockerfile"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+\["([^"]+)"`).FindSubmatch(data)
	if m == nil {
		return "", errors.New("the Dockerfile has no ENTRYPOINT in exec form")
	}
	return string(m[1]), nil
}

// docsFakeNodes parses docsFakeNodesEnv.
func docsFakeNodes() map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(os.Getenv(docsFakeNodesEnv), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// docsHelm is the documentation's helm: install, upgrade and template.
func docsHelm(args []string) error {
	if len(args) == 0 {
		return errors.New("helm: no command")
	}
	command := args[0]
	if command != "install" && command != "upgrade" && command != "template" {
		return fmt.Errorf("helm %s: the documentation's helm knows install, upgrade and template", command)
	}
	var positional, files, sets, setStrings, setFiles []string
	namespace := "default"
	for i := 1; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		takes := map[string]bool{"-n": true, "--namespace": true, "--set": true, "--set-string": true, "--set-file": true, "-f": true, "--values": true}
		if takes[name] && !hasValue {
			if i+1 >= len(args) {
				return fmt.Errorf("helm: flag %s needs a value", name)
			}
			i++
			value = args[i]
		}
		switch name {
		case "-n", "--namespace":
			namespace = value
		case "--set":
			sets = append(sets, value)
		case "--set-string":
			setStrings = append(setStrings, value)
		case "--set-file":
			setFiles = append(setFiles, value)
		case "-f", "--values":
			files = append(files, value)
		case "--create-namespace", "--install", "--reuse-values", "--wait":
		default:
			if strings.HasPrefix(a, "-") {
				return fmt.Errorf("helm: the documentation's helm does not know flag %s", a)
			}
			positional = append(positional, a)
		}
	}
	if len(positional) != 2 {
		return fmt.Errorf("helm %s: want a release name and a chart, have %q", command, positional)
	}
	release, chart := positional[0], positional[1]
	values := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var v map[string]any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return fmt.Errorf("helm: %s: %w", f, err)
		}
		values = chartutil.MergeTables(v, values)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, values); err != nil {
			return fmt.Errorf("helm: --set %s: %w", s, err)
		}
	}
	for _, s := range setStrings {
		if err := strvals.ParseIntoString(s, values); err != nil {
			return fmt.Errorf("helm: --set-string %s: %w", s, err)
		}
	}
	for _, s := range setFiles {
		reader := func(rs []rune) (any, error) {
			data, err := os.ReadFile(string(rs))
			return string(data), err
		}
		if err := strvals.ParseIntoFile(s, values, reader); err != nil {
			return fmt.Errorf("helm: --set-file %s: %w", s, err)
		}
	}
	objs, err := render.Helm(chart, release, namespace, values)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	if command == "template" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	if err := docsExec(os.Getenv(docsKubectlEnv), []string{"apply", "--dry-run=server", "-f", "-"}, nil, b.Bytes()); err != nil {
		return err
	}
	fmt.Printf("NAME: %s\nNAMESPACE: %s\nSTATUS: rendered and applied as a server-side dry run (%d objects)\n", release, namespace, len(objs))
	return nil
}
