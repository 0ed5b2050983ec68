package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestModuleExecutionFlag: --module-execution runs modules in workers by
// default and in wasp's process when asked; another value is an error.
func TestModuleExecutionFlag(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		inProcess bool
		err       string
	}{
		{"default", nil, false, ""},
		{"worker", []string{"--module-execution", "worker"}, false, ""},
		{"in-process", []string{"--module-execution", "in-process"}, true, ""},
		{"unknown", []string{"--module-execution", "thread"}, false, `--module-execution: "thread" is not "worker" or "in-process"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f runFlags
			cmd := &cobra.Command{}
			f.add(cmd)
			if err := cmd.Flags().Parse(append(tc.args, "--hostname-override", "node-a")); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.waspConfig(cmd.Flags(), func(s string) { t.Errorf("warning %q", s) })
			if err != nil {
				t.Fatal(err)
			}
			got, err := newRunConfig(cfg, &f, func() (string, error) { return "node-a", nil })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.modulesInProcess != tc.inProcess {
				t.Errorf("modules in process: %v, want %v", got.modulesInProcess, tc.inProcess)
			}
		})
	}
}
