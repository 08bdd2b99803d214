;; A rerank component in the component text format: it scores candidate i with i, so the
;; order comes back reversed. The tests swap the marked line for hostile behaviour that shows
;; only with more than two candidates, i.e. after the two-candidate upload smoke run.
(component
  (core module $m
    (memory (export "mem") 1)
    (global $heap (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                             (i32.sub (i32.const 0) (local.get 2))))
      (global.set $heap (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
    ;; result<list<scored>, string> at 256: tag, pointer, length; the list at 512.
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
      (if (result i32) (i32.le_u (local.get $n) (i32.const 2))
        (then (call $reverse (local.get $n)))
        (else
          (call $reverse (local.get $n)) ;; misbehaviour
        ))))
  (core instance $i (instantiate $m))
  (alias core export $i "mem" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (alias core export $i "rerank" (core func $rerank-core))
  (type $candidate' (record (field "id" string) (field "title" string) (field "text" string) (field "score" f32)))
  (export $candidate "candidate" (type $candidate'))
  (type $scored' (record (field "index" u32) (field "score" f32)))
  (export $scored "scored" (type $scored'))
  (func $rerank (param "query" string) (param "candidates" (list $candidate))
    (result (result (list $scored) (error string)))
    (canon lift (core func $rerank-core) (memory $mem) (realloc $realloc)))
  (export "rerank" (func $rerank)))
