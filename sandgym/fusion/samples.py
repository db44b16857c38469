"""Small programs per language, written here: a hello world, one that
echoes its stdin, one that does not compile (compiled languages) and one
that fails at run time. The tests and benchmarks/bench_run_code.py run
them; `sandgym serve --api sandbox-fusion` users can too, as a smoke test."""

from __future__ import annotations

HELLO: dict[str, str] = {
    "python": 'print("hello, world")\n',
    "cpp": '#include <iostream>\nint main() { std::cout << "hello, world" << std::endl; return 0; }\n',
    "nodejs": 'console.log("hello, world");\n',
    "typescript": 'const greeting: string = "hello, world";\nconsole.log(greeting);\n',
    "go": 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hello, world")\n}\n',
    "java": "public class Main {\n  public static void main(String[] args) {\n"
    '    System.out.println("hello, world");\n  }\n}\n',
    "rust": 'fn main() {\n    println!("hello, world");\n}\n',
    "bash": 'echo "hello, world"\n',
    "php": '<?php\necho "hello, world\\n";\n',
    "ruby": 'puts "hello, world"\n',
    "lua": 'print("hello, world")\n',
    "perl": 'print "hello, world\\n";\n',
    "D_ut": 'import std.stdio;\n\nunittest {\n    writeln("hello, world");\n}\n',
    "R": 'cat("hello, world\\n")\n',
    "csharp": "using System;\n\nclass Program {\n  static void Main() {\n"
    '    Console.WriteLine("hello, world");\n  }\n}\n',
    "scala": 'object Main {\n  def main(args: Array[String]): Unit = {\n    println("hello, world")\n  }\n}\n',
    "racket": '#lang racket/base\n(displayln "hello, world")\n',
}

# Each reads two integers from stdin and prints their sum.
SUM_STDIN: dict[str, str] = {
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
    "cpp": "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n",
    "nodejs": 'const [a, b] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\n'
    "console.log(a + b);\n",
    "typescript": 'const parts: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\n'
    "console.log(parts[0] + parts[1]);\n",
    "go": 'package main\n\nimport "fmt"\n\nfunc main() {\n'
    "\tvar a, b int64\n\tfmt.Scan(&a, &b)\n\tfmt.Println(a + b)\n}\n",
    "java": "import java.util.Scanner;\n\npublic class Main {\n  public static void main(String[] args) {\n"
    "    Scanner in = new Scanner(System.in);\n    long a = in.nextLong(), b = in.nextLong();\n"
    "    System.out.println(a + b);\n  }\n}\n",
    "rust": "use std::io::Read;\n\nfn main() {\n    let mut s = String::new();\n"
    "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
    "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
    '    println!("{}", v[0] + v[1]);\n}\n',
    "bash": "read a b\necho $((a + b))\n",
    "php": '<?php\n[$a, $b] = array_map("intval", preg_split("/\\s+/", trim(stream_get_contents(STDIN))));\n'
    'echo ($a + $b) . "\\n";\n',
    "ruby": "a, b = $stdin.read.split.map(&:to_i)\nputs a + b\n",
    "lua": 'local a, b = io.read("n", "n")\nprint(math.tointeger(a + b))\n',
    "perl": "my ($a, $b) = split ' ', <STDIN>;\nprint $a + $b, \"\\n\";\n",
    "R": 'x <- scan(file("stdin"), quiet = TRUE)\ncat(x[1] + x[2], "\\n", sep = "")\n',
    "csharp": "using System;\n\nclass Program {\n  static void Main() {\n"
    "    var p = Console.In.ReadToEnd().Split((char[])null, StringSplitOptions.RemoveEmptyEntries);\n"
    "    Console.WriteLine(long.Parse(p[0]) + long.Parse(p[1]));\n  }\n}\n",
    "scala": "object Main {\n  def main(args: Array[String]): Unit = {\n"
    '    val p = scala.io.Source.stdin.mkString.trim.split("\\\\s+").map(_.toLong)\n'
    "    println(p(0) + p(1))\n  }\n}\n",
    "racket": "#lang racket/base\n(define a (read))\n(define b (read))\n(displayln (+ a b))\n",
}

# Compiled languages: a program the compiler refuses.
COMPILE_ERROR: dict[str, str] = {
    "cpp": "int main() { return undefined_name; }\n",
    "typescript": 'const n: number = "not a number";\nconsole.log(n);\n',
    "go": "package main\n\nfunc main() {\n\tundefinedName()\n}\n",
    "java": 'public class Main {\n  public static void main(String[] args) {\n    int x = "text";\n  }\n}\n',
    "rust": 'fn main() {\n    let x: i32 = "text";\n}\n',
    "D_ut": "unittest {\n    int x = undefinedName;\n}\n",
    "csharp": 'class Program {\n  static void Main() {\n    int x = "text";\n  }\n}\n',
    "scala": 'object Main {\n  def main(args: Array[String]): Unit = {\n    val x: Int = "text"\n  }\n}\n',
    "racket": "#lang racket/base\n(displayln (+ 1 undefined-name))\n",
}

# Interpreted languages: a program the parser refuses (a run failure).
SYNTAX_ERROR: dict[str, str] = {
    "python": "def f(:\n",
    "R": "x <- (1 + \n",
    "ruby": "def f(\n",
    "perl": "my $x = ;\n",
}

# A program that compiles and exits non-zero at run time.
RUNTIME_ERROR: dict[str, str] = {
    "python": 'raise SystemExit("boom")\n',
    "cpp": "#include <cstdlib>\nint main() { std::abort(); }\n",
    "nodejs": 'throw new Error("boom");\n',
    "go": 'package main\n\nfunc main() {\n\tpanic("boom")\n}\n',
    "java": "public class Main {\n  public static void main(String[] args) {\n"
    '    throw new RuntimeException("boom");\n  }\n}\n',
    "rust": 'fn main() {\n    panic!("boom");\n}\n',
    "bash": "exit 3\n",
    "ruby": 'raise "boom"\n',
    "R": 'stop("boom")\n',
    "csharp": 'class Program {\n  static void Main() {\n    throw new System.Exception("boom");\n  }\n}\n',
    "scala": "object Main {\n  def main(args: Array[String]): Unit = {\n"
    '    throw new RuntimeException("boom")\n  }\n}\n',
    "racket": '#lang racket/base\n(error "boom")\n',
}

# A program that never ends on its own.
LOOP: dict[str, str] = {
    "python": "while True:\n    pass\n",
    "cpp": "int main() { volatile int x = 0; for (;;) x++; }\n",
    "go": "package main\n\nfunc main() {\n\tfor {\n\t}\n}\n",
    "bash": "while :; do :; done\n",
}

# SandboxFusion's test modes: a test file whose tests all pass, and one
# with a failing test (the runner's report names it).
TEST_PASS: dict[str, str] = {
    "pytest": "def add(a, b):\n    return a + b\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    "go_test": 'package main\n\nimport "testing"\n\nfunc add(a, b int) int { return a + b }\n\n'
    "func TestAdd(t *testing.T) {\n\tif got := add(2, 3); got != 5 {\n"
    '\t\tt.Fatalf("add(2, 3) = %d", got)\n\t}\n}\n',
    "junit": "import org.junit.jupiter.api.Test;\n\nimport static org.junit.jupiter.api.Assertions.assertEquals;\n\n"
    "public class AddTest {\n  static int add(int a, int b) { return a + b; }\n\n"
    "  @Test\n  void addsTwoNumbers() {\n    assertEquals(5, add(2, 3));\n  }\n}\n",
    "jest": "function add(a: number, b: number): number {\n  return a + b;\n}\n\n"
    'test("adds two numbers", () => {\n  expect(add(2, 3)).toBe(5);\n});\n',
}

# Each fails one test, named `wrong_sum` in its runner's report.
TEST_FAIL: dict[str, str] = {
    "pytest": "def test_right_sum():\n    assert 2 + 3 == 5\n\n\ndef test_wrong_sum():\n    assert 2 + 3 == 6\n",
    "go_test": 'package main\n\nimport "testing"\n\nfunc Test_wrong_sum(t *testing.T) {\n'
    '\tif 2+3 != 6 {\n\t\tt.Errorf("2 + 3 is not 6")\n\t}\n}\n',
    "junit": "import org.junit.jupiter.api.Test;\n\nimport static org.junit.jupiter.api.Assertions.assertEquals;\n\n"
    "public class SumTest {\n  @Test\n  void right_sum() {\n    assertEquals(5, 2 + 3);\n  }\n\n"
    "  @Test\n  void wrong_sum() {\n    assertEquals(6, 2 + 3);\n  }\n}\n",
    "jest": 'test("right_sum", () => {\n  expect(2 + 3).toBe(5);\n});\n\n'
    'test("wrong_sum", () => {\n  expect(2 + 3).toBe(6);\n});\n',
}
