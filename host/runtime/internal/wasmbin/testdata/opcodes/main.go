// Command opcodes is a test guest that exercises much of what the Go
// compiler emits: floats, maps, strings, closures, interfaces, defer and
// recover, goroutines, channels and select.
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
)

type shape interface{ area() float64 }

type circle struct{ r float64 }
type rect struct{ w, h float64 }

func (c circle) area() float64 { return math.Pi * c.r * c.r }
func (r rect) area() float64   { return r.w * r.h }

func floats(seed int64) string {
	var b strings.Builder
	x := float64(seed) / 7
	for i := 0; i < 50; i++ {
		x = math.Sin(x)*3 + math.Sqrt(math.Abs(x)+1) - math.Floor(x/3)
		f := float32(x) * 1.5
		fmt.Fprintf(&b, "%.6g,%v,%d;", x, f, int64(x*1e6))
	}
	shapes := []shape{circle{float64(seed%5) + 1}, rect{2, float64(seed % 9)}}
	for _, s := range shapes {
		b.WriteString(strconv.FormatFloat(s.area(), 'e', 8, 64))
	}
	return b.String()
}

func maps(seed int64) string {
	m := map[string]int{}
	words := strings.Fields("the quick brown fox jumps over the lazy dog again and again " + strconv.FormatInt(seed, 36))
	for i, w := range words {
		m[strings.ToUpper(w)] += i
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out, _ := json.Marshal(struct {
		Keys []string
		M    map[string]int
	}{keys, m})
	return string(out) + strings.Map(func(r rune) rune {
		if unicode.IsUpper(r) {
			return unicode.ToLower(r)
		}
		return unicode.ToUpper(r)
	}, "Hello, Wörld ✓")
}

func closures(seed int64) string {
	var fs []func(int64) int64
	for i := int64(0); i < 8; i++ {
		fs = append(fs, func(x int64) int64 { return x*i + seed })
	}
	acc := int64(1)
	for _, f := range fs {
		acc = f(acc) % 1000000007
	}
	return strconv.FormatInt(acc, 10)
}

func recovers(seed int64) (out string) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprint("recovered: ", r)
		}
	}()
	s := make([]int, 3)
	i := int(seed % 10)
	s[i]++ // panics for i >= 3
	return "no panic"
}

func goroutines(seed int64) string {
	work := make(chan int64)
	results := make(chan int64, 4)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range work {
				results <- v * v
			}
		}()
	}
	go func() {
		for i := int64(0); i < 100; i++ {
			work <- seed + i
		}
		close(work)
		wg.Wait()
		close(quit)
	}()
	var sum int64
	n := 0
	for {
		select {
		case v := <-results:
			sum += v
			n++
		case <-quit:
			for len(results) > 0 {
				sum += <-results
				n++
			}
			return fmt.Sprintf("%d/%d", sum, n)
		}
	}
}

// run returns a hash of everything the functions above compute for seed.
//
//go:wasmexport run
func run(seed int64) int64 {
	h := sha256.New()
	for _, s := range []string{floats(seed), maps(seed), closures(seed), recovers(seed), goroutines(seed)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return int64(binary.LittleEndian.Uint64(h.Sum(nil)))
}

func main() {}
