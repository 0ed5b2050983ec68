package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupLimit(t *testing.T) {
	tests := []struct {
		name   string
		cgroup string            // /proc/self/cgroup
		files  map[string]string // under the cgroup mount
		want   int64
	}{
		{name: "v2 own cgroup", cgroup: "0::/kubepods/pod1/wasp\n",
			files: map[string]string{"kubepods/pod1/wasp/memory.max": "268435456\n"}, want: 256 << 20},
		{name: "v2 namespaced: root of the mount", cgroup: "0::/\n",
			files: map[string]string{"memory.max": "536870912\n"}, want: 512 << 20},
		{name: "v2 unlimited", cgroup: "0::/system.slice/wasp.service\n",
			files: map[string]string{"system.slice/wasp.service/memory.max": "max\n"}, want: 0},
		{name: "v1", cgroup: "12:cpu,cpuacct:/x\n4:memory:/kubepods/pod1\n",
			files: map[string]string{"memory/kubepods/pod1/memory.limit_in_bytes": "1073741824\n"}, want: 1 << 30},
		{name: "v1 unlimited", cgroup: "4:memory:/\n",
			files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, want: 0},
		{name: "no file", cgroup: "0::/gone\n", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			proc := filepath.Join(dir, "cgroup")
			if err := os.WriteFile(proc, []byte(tt.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(dir, "fs")
			for name, content := range tt.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := cgroupLimitFrom(proc, root)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("limit = %d; want %d", got, tt.want)
			}
		})
	}
}

func TestMemoryPolicy(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	limit := func(n int64) func() (int64, error) { return func() (int64, error) { return n, nil } }
	tests := []struct {
		name      string
		env       map[string]string
		cgroup    int64
		wantGC    int
		wantLimit int64
		wantFrom  string
	}{
		{name: "defaults, no cgroup limit", wantGC: defaultGCPercent, wantLimit: math.MaxInt64},
		{name: "cgroup limit", cgroup: 1000 << 20, wantGC: defaultGCPercent, wantLimit: 900 << 20, wantFrom: "cgroup"},
		{name: "GOGC set", env: map[string]string{"GOGC": "100"}, wantGC: 100, wantLimit: math.MaxInt64},
		{name: "GOMEMLIMIT set", env: map[string]string{"GOMEMLIMIT": "1GiB"}, cgroup: 1000 << 20, wantGC: defaultGCPercent,
			wantLimit: math.MaxInt64, wantFrom: "GOMEMLIMIT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The runtime reads GOGC and GOMEMLIMIT at start: emulate
			// the operator's GOGC, and restore the test process's settings.
			gc, lim := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
			t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(lim) })
			p := setMemoryPolicy(env(tt.env), limit(tt.cgroup))
			if p.gcPercent != tt.wantGC || p.limit != tt.wantLimit || p.limitSource != tt.wantFrom {
				t.Errorf("policy = %+v; want gcPercent %d, limit %d from %q", p, tt.wantGC, tt.wantLimit, tt.wantFrom)
			}
		})
	}
}

func TestIdleReleaser(t *testing.T) {
	var syncs uint64
	released := 0
	r := idleReleaser{syncs: func() uint64 { return syncs }, release: func() { released++ }}
	steps := []struct {
		syncs uint64 // count seen at the tick
		want  int    // releases so far
	}{
		{0, 0}, // nothing happened
		{0, 0},
		{1, 0}, // a sync: wait for a quiet tick
		{3, 0}, // still syncing
		{3, 1}, // quiet: release once
		{3, 1}, // still quiet: nothing more to return
		{3, 1},
		{4, 1},
		{4, 2},
	}
	for i, s := range steps {
		syncs = s.syncs
		r.tick()
		if released != s.want {
			t.Fatalf("tick %d (syncs %d): %d releases, want %d", i, s.syncs, released, s.want)
		}
	}
}
