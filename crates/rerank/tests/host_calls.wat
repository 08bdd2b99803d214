;; A rerank component that calls the host interface (`sluice:rerank/host`): with more than two
;; candidates (after the two-candidate upload smoke run) it runs the marked host-call flood,
;; then returns the reversed order. The tests put one flood in the marked place, using:
;;   $fill(at, len)           fills [at, at+len) with the words "ab c" over and over
;;   $count(ptr, len) -> u32  host count-tokens
;;   $embed(list, n, ret)     host embed of n strings whose (pointer, length) pairs are at list;
;;                            the result<list<list<f32>>, string> is written at ret
;;   $log(level, ptr, len)    host log
;; Memory: the result record at 256 and its list at 512; scratch pairs at 4096; text from
;; 65536; the allocator hands out memory from 1 MiB and starts over below 15 MiB (what it gave
;; is never read again), so that a flood never runs out of it.
(component
  (import "sluice:rerank/host@0.1.0" (instance $host
    (type $l (enum "debug" "info" "warn" "error"))
    (export "level" (type $level (eq $l)))
    (export "log" (func (param "level" $level) (param "message" string)))
    (export "embed" (func (param "texts" (list string)) (result (result (list (list f32)) (error string)))))
    (export "count-tokens" (func (param "text" string) (result u32)))))
  (alias export $host "log" (func $log))
  (alias export $host "embed" (func $embed))
  (alias export $host "count-tokens" (func $count))

  (core module $libc-module
    (memory (export "mem") 256)
    (global $heap (mut i32) (i32.const 0x100000))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (if (i32.gt_u (i32.add (global.get $heap) (local.get 3)) (i32.const 0xF00000))
        (then (global.set $heap (i32.const 0x100000))))
      (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                             (i32.sub (i32.const 0) (local.get 2))))
      (global.set $heap (i32.add (local.get $p) (local.get 3)))
      (local.get $p)))
  (core instance $libc (instantiate $libc-module))
  (alias core export $libc "mem" (core memory $mem))
  (alias core export $libc "realloc" (core func $realloc))
  (core func $log-core (canon lower (func $log) (memory $mem)))
  (core func $embed-core (canon lower (func $embed) (memory $mem) (realloc $realloc)))
  (core func $count-core (canon lower (func $count) (memory $mem)))

  (core module $m
    (import "libc" "mem" (memory 256))
    (import "host" "log" (func $log (param i32 i32 i32)))
    (import "host" "embed" (func $embed (param i32 i32 i32)))
    (import "host" "count" (func $count (param i32 i32) (result i32)))
    (func $fill (param $at i32) (param $len i32)
      (local $done i32)
      (i32.store (local.get $at) (i32.const 0x63206261)) ;; "ab c"
      (local.set $done (i32.const 4))
      (block $full
        (loop $double
          (br_if $full (i32.ge_u (local.get $done) (local.get $len)))
          (memory.copy
            (i32.add (local.get $at) (local.get $done))
            (local.get $at)
            (select (local.get $done) (i32.sub (local.get $len) (local.get $done))
                    (i32.le_u (i32.add (local.get $done) (local.get $done)) (local.get $len))))
          (local.set $done (i32.add (local.get $done) (local.get $done)))
          (br $double))))
    ;; Pairs for $embed: n texts of len bytes each, the i-th starting i bytes into the text.
    (func $pairs (param $n i32) (param $len i32)
      (local $i i32)
      (block $done
        (loop $next
          (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
          (i32.store (i32.add (i32.const 4096) (i32.mul (local.get $i) (i32.const 8)))
                     (i32.add (i32.const 65536) (local.get $i)))
          (i32.store (i32.add (i32.const 4100) (i32.mul (local.get $i) (i32.const 8)))
                     (local.get $len))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next))))
    (func $reverse (param $n i32) (result i32)
      (local $i i32)
      (block $done
        (loop $next
          (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
          (i32.store (i32.add (i32.const 512) (i32.mul (local.get $i) (i32.const 8))) (local.get $i))
          (f32.store (i32.add (i32.const 516) (i32.mul (local.get $i) (i32.const 8)))
                     (f32.convert_i32_u (local.get $i)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next)))
      (i32.store8 (i32.const 256) (i32.const 0))
      (i32.store (i32.const 260) (i32.const 512))
      (i32.store (i32.const 264) (local.get $n))
      (i32.const 256))
    (func (export "rerank") (param $q i32) (param $ql i32) (param $c i32) (param $n i32) (result i32)
      (local $k i32)
      (if (i32.gt_u (local.get $n) (i32.const 2))
        (then
          (nop) ;; flood
        ))
      (call $reverse (local.get $n))))
  (core instance $i (instantiate $m
    (with "libc" (instance $libc))
    (with "host" (instance
      (export "log" (func $log-core))
      (export "embed" (func $embed-core))
      (export "count" (func $count-core))))))
  (alias core export $i "rerank" (core func $rerank-core))
  (type $candidate' (record (field "id" string) (field "title" string) (field "text" string) (field "score" f32)))
  (export $candidate "candidate" (type $candidate'))
  (type $scored' (record (field "index" u32) (field "score" f32)))
  (export $scored "scored" (type $scored'))
  (func $rerank (param "query" string) (param "candidates" (list $candidate))
    (result (result (list $scored) (error string)))
    (canon lift (core func $rerank-core) (memory $mem) (realloc $realloc)))
  (export "rerank" (func $rerank)))
