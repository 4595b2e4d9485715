"""The code environment's problems: a spec, a reference solution, fixed cases and a seeded input generator each.

generate.py turns every problem into one task: the first two fixed cases are the visible tests, the remaining fixed
cases (edge cases) plus generated ones are the hidden tests; expected values come from running the reference solution.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Args = list[Any]


@dataclass(frozen=True)
class Problem:
    """One function to write. `cases` are argument lists; `generate(rng)` draws one more argument list."""

    function: str
    signature: str
    spec: str
    solution: str
    cases: list[Args]
    generate: Callable[[random.Random], Args]


def _word(rng: random.Random, letters: str = string.ascii_lowercase, lo: int = 1, hi: int = 7) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(lo, hi)))


def _ints(rng: random.Random, lo: int = -50, hi: int = 50, n_lo: int = 0, n_hi: int = 10) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(n_lo, n_hi))]


def _sentence(rng: random.Random) -> str:
    return " ".join(_word(rng) for _ in range(rng.randint(0, 6)))


def _nested(rng: random.Random, depth: int = 0) -> list[Any]:
    out: list[Any] = []
    for _ in range(rng.randint(0, 4)):
        out.append(_nested(rng, depth + 1) if depth < 3 and rng.random() < 0.3 else rng.randint(0, 9))
    return out


def _prefixed_words(rng: random.Random) -> list[str]:
    prefix = _word(rng, "ab", 0, 3)
    return [prefix + _word(rng, "ab", 0, 3) for _ in range(rng.randint(0, 4))]


def _matrix(rng: random.Random) -> list[list[int]]:
    rows, cols = rng.randint(1, 4), rng.randint(1, 4)
    return [[rng.randint(0, 9) for _ in range(cols)] for _ in range(rows)]


def _ipv4ish(rng: random.Random) -> str:
    parts = [str(rng.choice([rng.randint(0, 255), rng.randint(256, 999), rng.randint(0, 9)])) for _ in range(4)]
    if rng.random() < 0.2:
        parts = parts[: rng.randint(1, 3)]
    if rng.random() < 0.15:
        parts[0] = "0" + parts[0]
    return ".".join(parts)


PROBLEMS: list[Problem] = [
    Problem(
        "reverse_words", "reverse_words(text: str) -> str",
        "Return the words of `text` (separated by any whitespace) in reverse order, joined by single spaces.",
        "def reverse_words(text):\n    return ' '.join(reversed(text.split()))\n",
        [["hello world"], ["  one two   three "], [""], ["single"]],
        lambda rng: [_sentence(rng)],
    ),
    Problem(
        "is_palindrome", "is_palindrome(text: str) -> bool",
        "True when `text` reads the same backwards, ignoring case and every character that is not a letter or digit.",
        "def is_palindrome(text):\n    s = [c.lower() for c in text if c.isalnum()]\n    return s == s[::-1]\n",
        [["Racecar"], ["hello"], ["A man, a plan, a canal: Panama!"], [""], ["ab"]],
        lambda rng: [(w := _word(rng, "abc")) + rng.choice(["", "x", " "]) + w[::-1]],
    ),
    Problem(
        "count_vowels", "count_vowels(text: str) -> int",
        "Count the vowels a, e, i, o, u in `text`, upper or lower case.",
        "def count_vowels(text):\n    return sum(c in 'aeiou' for c in text.lower())\n",
        [["hello"], ["AEIOU xyz"], [""], ["rhythm"]],
        lambda rng: [_word(rng, string.ascii_letters + " ", 0, 20)],
    ),
    Problem(
        "fizzbuzz", "fizzbuzz(n: int) -> list[str]",
        "For i from 1 to n return 'FizzBuzz' if i is divisible by 15, 'Fizz' if by 3, 'Buzz' if by 5, else str(i).",
        "def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n"
        "        out.append('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else str(i))\n"
        "    return out\n",
        [[5], [15], [0], [1]],
        lambda rng: [rng.randint(0, 40)],
    ),
    Problem(
        "flatten", "flatten(nested: list) -> list",
        "Flatten arbitrarily nested lists into one list of their non-list items, in order.",
        "def flatten(nested):\n    out = []\n    for item in nested:\n"
        "        if isinstance(item, list):\n            out.extend(flatten(item))\n        else:\n"
        "            out.append(item)\n    return out\n",
        [[[1, [2, 3]]], [[[[]], [4, [5, [6]]]]], [[]], [[[[[7]]]]]],
        lambda rng: [_nested(rng)],
    ),
    Problem(
        "chunk", "chunk(items: list, size: int) -> list[list]",
        "Split `items` into consecutive pieces of length `size` (size >= 1); the last piece may be shorter.",
        "def chunk(items, size):\n    return [items[i:i + size] for i in range(0, len(items), size)]\n",
        [[[1, 2, 3, 4, 5], 2], [[1, 2], 5], [[], 3], [[1, 2, 3], 1]],
        lambda rng: [_ints(rng, 0, 9), rng.randint(1, 4)],
    ),
    Problem(
        "run_length_encode", "run_length_encode(text: str) -> str",
        "Encode each run of equal characters as the character followed by the run length: 'aaab' -> 'a3b1'.",
        "def run_length_encode(text):\n    out = []\n    i = 0\n    while i < len(text):\n        j = i\n"
        "        while j < len(text) and text[j] == text[i]:\n            j += 1\n"
        "        out.append(f'{text[i]}{j - i}')\n        i = j\n    return ''.join(out)\n",
        [["aaab"], ["abc"], [""], ["zzzzzzzzzzzz"]],
        lambda rng: ["".join(rng.choice("ab") * rng.randint(1, 4) for _ in range(rng.randint(0, 5)))],
    ),
    Problem(
        "caesar_shift", "caesar_shift(text: str, shift: int) -> str",
        "Shift every ASCII letter by `shift` places in the alphabet (wrapping, keeping case); other characters stay.",
        "def caesar_shift(text, shift):\n    out = []\n    for c in text:\n"
        "        if 'a' <= c <= 'z':\n            out.append(chr((ord(c) - 97 + shift) % 26 + 97))\n"
        "        elif 'A' <= c <= 'Z':\n            out.append(chr((ord(c) - 65 + shift) % 26 + 65))\n"
        "        else:\n            out.append(c)\n    return ''.join(out)\n",
        [["abc", 1], ["Hello, World!", 3], ["xyz", -29], ["", 5]],
        lambda rng: [_word(rng, string.ascii_letters + " .!", 0, 12), rng.randint(-60, 60)],
    ),
    Problem(
        "second_largest", "second_largest(nums: list[int]) -> int | None",
        "The second largest distinct value in `nums`, or None when there are fewer than two distinct values.",
        "def second_largest(nums):\n    distinct = sorted(set(nums))\n    return distinct[-2] if len(distinct) >= 2 else None\n",
        [[[3, 1, 2]], [[5, 5, 4]], [[7, 7]], [[]]],
        lambda rng: [_ints(rng, -5, 5)],
    ),
    Problem(
        "dedupe", "dedupe(items: list) -> list",
        "Remove repeated items, keeping the first occurrence of each and the original order.",
        "def dedupe(items):\n    seen = set()\n    out = []\n    for item in items:\n"
        "        if item not in seen:\n            seen.add(item)\n            out.append(item)\n    return out\n",
        [[[1, 2, 1, 3, 2]], [["b", "a", "b"]], [[]], [[4, 4, 4]]],
        lambda rng: [_ints(rng, 0, 5)],
    ),
    Problem(
        "word_frequencies", "word_frequencies(text: str) -> dict[str, int]",
        "Count words in `text`: a word is a maximal run of ASCII letters, compared in lower case.",
        "import re\n\n\ndef word_frequencies(text):\n    counts = {}\n"
        "    for w in re.findall('[a-z]+', text.lower()):\n        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
        [["The cat and the hat."], ["a-b a"], [""], ["It's 2 o'clock"]],
        lambda rng: [" ".join(rng.choice(["a", "B", "cat", "Cat!", "dog,", "x-y"]) for _ in range(rng.randint(0, 8)))],
    ),
    Problem(
        "is_prime", "is_prime(n: int) -> bool",
        "True when `n` is a prime number (n may be zero or negative, which are not prime).",
        "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n"
        "        if n % i == 0:\n            return False\n        i += 1\n    return True\n",
        [[7], [9], [1], [-7], [2], [7919]],
        lambda rng: [rng.randint(-10, 2000)],
    ),
    Problem(
        "primes_up_to", "primes_up_to(n: int) -> list[int]",
        "All primes p with 2 <= p <= n, ascending.",
        "def primes_up_to(n):\n    return [p for p in range(2, n + 1) if all(p % d for d in range(2, int(p ** 0.5) + 1))]\n",
        [[10], [2], [1], [30]],
        lambda rng: [rng.randint(-5, 120)],
    ),
    Problem(
        "gcd_list", "gcd_list(nums: list[int]) -> int",
        "The greatest common divisor of all numbers (always >= 0); the gcd of an empty list is 0.",
        "import math\n\n\ndef gcd_list(nums):\n    g = 0\n    for x in nums:\n        g = math.gcd(g, x)\n    return g\n",
        [[[12, 18]], [[7, 13]], [[]], [[-4, 6]], [[0, 0]]],
        lambda rng: [[rng.randint(-8, 8) * rng.choice([1, 2, 6, 10]) for _ in range(rng.randint(0, 5))]],
    ),
    Problem(
        "digit_sum", "digit_sum(n: int) -> int",
        "The sum of the decimal digits of `n`, ignoring its sign.",
        "def digit_sum(n):\n    return sum(int(d) for d in str(abs(n)))\n",
        [[123], [-45], [0], [99999]],
        lambda rng: [rng.randint(-10**9, 10**9)],
    ),
    Problem(
        "to_binary", "to_binary(n: int) -> str",
        "The binary digits of `n` without a prefix; negative numbers get a leading '-'; 0 is '0'.",
        "def to_binary(n):\n    return ('-' if n < 0 else '') + format(abs(n), 'b')\n",
        [[5], [0], [-6], [1024]],
        lambda rng: [rng.randint(-5000, 5000)],
    ),
    Problem(
        "to_roman", "to_roman(n: int) -> str",
        "The Roman numeral for 1 <= n <= 3999, using subtractive forms (4 is 'IV', 900 is 'CM').",
        "def to_roman(n):\n    table = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'),\n"
        "             (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
        "    out = []\n    for value, numeral in table:\n        while n >= value:\n"
        "            out.append(numeral)\n            n -= value\n    return ''.join(out)\n",
        [[4], [1994], [1], [3999]],
        lambda rng: [rng.randint(1, 3999)],
    ),
    Problem(
        "from_roman", "from_roman(numeral: str) -> int",
        "The value of a valid Roman numeral (subtractive forms allowed, upper case), e.g. 'MCMXCIV' -> 1994.",
        "def from_roman(numeral):\n    values = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n"
        "    total = 0\n    for i, c in enumerate(numeral):\n        v = values[c]\n"
        "        if i + 1 < len(numeral) and values[numeral[i + 1]] > v:\n            total -= v\n"
        "        else:\n            total += v\n    return total\n",
        [["IV"], ["MCMXCIV"], ["I"], ["MMMCMXCIX"]],
        lambda rng: [_roman(rng.randint(1, 3999))],
    ),
    Problem(
        "balanced_brackets", "balanced_brackets(text: str) -> bool",
        "True when the brackets ()[]{} in `text` are balanced and properly nested; other characters are ignored.",
        "def balanced_brackets(text):\n    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n"
        "    for c in text:\n        if c in '([{':\n            stack.append(c)\n        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n    return not stack\n",
        [["(a[b]{c})"], ["(]"], [""], ["(("], ["x)"]],
        lambda rng: ["".join(rng.choice("()[]{}a") for _ in range(rng.randint(0, 10)))],
    ),
    Problem(
        "merge_sorted", "merge_sorted(a: list[int], b: list[int]) -> list[int]",
        "Merge two ascending lists into one ascending list keeping every element (duplicates included).",
        "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
        "            out.append(b[j])\n            j += 1\n    return out + a[i:] + b[j:]\n",
        [[[1, 3, 5], [2, 4]], [[], [1]], [[], []], [[1, 1], [1]]],
        lambda rng: [sorted(_ints(rng, 0, 20)), sorted(_ints(rng, 0, 20))],
    ),
    Problem(
        "rotate_right", "rotate_right(items: list, k: int) -> list",
        "Rotate `items` right by `k` places (k may be negative, meaning left, or larger than the length).",
        "def rotate_right(items, k):\n    if not items:\n        return []\n    k %= len(items)\n"
        "    return items[-k:] + items[:-k] if k else list(items)\n",
        [[[1, 2, 3, 4], 1], [[1, 2, 3], -1], [[], 3], [[1, 2], 5]],
        lambda rng: [_ints(rng, 0, 9), rng.randint(-12, 12)],
    ),
    Problem(
        "transpose", "transpose(matrix: list[list[int]]) -> list[list[int]]",
        "The transpose of a non-empty rectangular matrix given as a list of rows.",
        "def transpose(matrix):\n    return [list(col) for col in zip(*matrix)]\n",
        [[[[1, 2], [3, 4]]], [[[1, 2, 3]]], [[[1], [2]]], [[[5]]]],
        lambda rng: [_matrix(rng)],
    ),
    Problem(
        "running_sum", "running_sum(nums: list[int]) -> list[int]",
        "The prefix sums of `nums`: element i is nums[0] + ... + nums[i].",
        "def running_sum(nums):\n    out, total = [], 0\n    for x in nums:\n        total += x\n        out.append(total)\n"
        "    return out\n",
        [[[1, 2, 3]], [[5, -5]], [[]], [[0]]],
        lambda rng: [_ints(rng)],
    ),
    Problem(
        "max_subarray_sum", "max_subarray_sum(nums: list[int]) -> int",
        "The largest sum of a non-empty contiguous slice of the non-empty list `nums`.",
        "def max_subarray_sum(nums):\n    best = cur = nums[0]\n    for x in nums[1:]:\n"
        "        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n",
        [[[-2, 1, -3, 4, -1, 2, 1, -5, 4]], [[1]], [[-3, -1, -2]], [[5, -1, 5]]],
        lambda rng: [_ints(rng, -20, 20, 1, 12)],
    ),
    Problem(
        "are_anagrams", "are_anagrams(a: str, b: str) -> bool",
        "True when `a` and `b` use the same letters the same number of times, ignoring case and spaces.",
        "def are_anagrams(a, b):\n    def key(s):\n        return sorted(s.replace(' ', '').lower())\n"
        "    return key(a) == key(b)\n",
        [["Listen", "Silent"], ["abc", "abd"], ["", ""], ["Dormitory", "dirty room"]],
        lambda rng: [(w := _word(rng, "abcd")), "".join(rng.sample(w, len(w))) + rng.choice(["", "", "a"])],
    ),
    Problem(
        "snake_to_camel", "snake_to_camel(name: str) -> str",
        "Convert a lower-case snake_case name to camelCase: 'hello_big_world' -> 'helloBigWorld'. "
        "Empty parts (from repeated, leading or trailing underscores) are dropped.",
        "def snake_to_camel(name):\n    parts = [p for p in name.split('_') if p]\n    if not parts:\n        return ''\n"
        "    return parts[0] + ''.join(p[:1].upper() + p[1:] for p in parts[1:])\n",
        [["hello_world"], ["a_b_c"], [""], ["__x__y_"]],
        lambda rng: ["_".join(_word(rng, lo=0, hi=4) for _ in range(rng.randint(1, 4)))],
    ),
    Problem(
        "camel_to_snake", "camel_to_snake(name: str) -> str",
        "Convert camelCase or PascalCase (ASCII letters only) to snake_case: each upper-case letter becomes '_' plus "
        "its lower case, except at the very start, where it is just lower-cased. 'helloWorld' -> 'hello_world'.",
        "def camel_to_snake(name):\n    out = []\n    for i, c in enumerate(name):\n"
        "        if c.isupper():\n            out.append(('_' if i else '') + c.lower())\n        else:\n"
        "            out.append(c)\n    return ''.join(out)\n",
        [["helloWorld"], ["HTTPServer"], [""], ["Abc"]],
        lambda rng: ["".join(rng.choice("abAB") for _ in range(rng.randint(0, 8)))],
    ),
    Problem(
        "longest_common_prefix", "longest_common_prefix(words: list[str]) -> str",
        "The longest string that starts every word in `words`; '' for an empty list.",
        "def longest_common_prefix(words):\n    if not words:\n        return ''\n    prefix = words[0]\n"
        "    for w in words[1:]:\n        while not w.startswith(prefix):\n            prefix = prefix[:-1]\n"
        "    return prefix\n",
        [[["flower", "flow", "flight"]], [["dog", "car"]], [[]], [["same"]]],
        lambda rng: [_prefixed_words(rng)],
    ),
    Problem(
        "pascal_row", "pascal_row(n: int) -> list[int]",
        "Row `n` of Pascal's triangle, counting from 0: pascal_row(0) == [1], pascal_row(3) == [1, 3, 3, 1].",
        "def pascal_row(n):\n    row = [1]\n    for _ in range(n):\n        row = [1] + [a + b for a, b in zip(row, row[1:])] + [1]\n"
        "    return row\n",
        [[0], [3], [1], [10]],
        lambda rng: [rng.randint(0, 25)],
    ),
    Problem(
        "collatz_steps", "collatz_steps(n: int) -> int",
        "How many steps the Collatz map (n/2 if n is even, else 3n+1) takes to reach 1 from n >= 1.",
        "def collatz_steps(n):\n    steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
        "        steps += 1\n    return steps\n",
        [[6], [1], [27], [2]],
        lambda rng: [rng.randint(1, 10000)],
    ),
    Problem(
        "median", "median(nums: list[int]) -> float",
        "The median of a non-empty list as a float: the middle value, or the mean of the two middle values.",
        "def median(nums):\n    s = sorted(nums)\n    mid = len(s) // 2\n"
        "    return float(s[mid]) if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n",
        [[[3, 1, 2]], [[4, 1, 3, 2]], [[7]], [[-1, -1]]],
        lambda rng: [_ints(rng, -30, 30, 1, 9)],
    ),
    Problem(
        "two_sum", "two_sum(nums: list[int], target: int) -> list[int]",
        "Indices [i, j] with i < j and nums[i] + nums[j] == target, choosing the smallest j and then the smallest i; "
        "[] when no pair exists.",
        "def two_sum(nums, target):\n    for j in range(len(nums)):\n        for i in range(j):\n"
        "            if nums[i] + nums[j] == target:\n                return [i, j]\n    return []\n",
        [[[2, 7, 11, 15], 9], [[3, 3], 6], [[1, 2], 10], [[], 0]],
        lambda rng: [_ints(rng, -5, 10), rng.randint(-5, 15)],
    ),
    Problem(
        "hamming_distance", "hamming_distance(a: str, b: str) -> int",
        "The number of positions at which the equal-length strings `a` and `b` differ.",
        "def hamming_distance(a, b):\n    return sum(x != y for x, y in zip(a, b))\n",
        [["karolin", "kathrin"], ["abc", "abc"], ["", ""], ["0000", "1111"]],
        lambda rng: [(w := _word(rng, "01", 0, 10)), "".join(rng.choice("01") for _ in w)],
    ),
    Problem(
        "spiral_order", "spiral_order(matrix: list[list[int]]) -> list[int]",
        "The elements of a non-empty rectangular matrix in clockwise spiral order starting at the top-left.",
        "def spiral_order(matrix):\n    m = [list(r) for r in matrix]\n    out = []\n    while m:\n"
        "        out.extend(m.pop(0))\n        m = [list(r) for r in zip(*m)][::-1]\n    return out\n",
        [[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]], [[[1, 2], [3, 4], [5, 6]]], [[[1]]], [[[1, 2, 3, 4]]]],
        lambda rng: [_matrix(rng)],
    ),
    Problem(
        "valid_ipv4", "valid_ipv4(text: str) -> bool",
        "True when `text` is four decimal numbers 0-255 separated by dots, with no leading zeros (except '0' itself) "
        "and nothing else.",
        "def valid_ipv4(text):\n    parts = text.split('.')\n    if len(parts) != 4:\n        return False\n"
        "    for p in parts:\n        if not p.isdigit() or not p.isascii() or (len(p) > 1 and p[0] == '0') or int(p) > 255:\n"
        "            return False\n    return True\n",
        [["192.168.0.1"], ["256.1.1.1"], ["01.2.3.4"], [""], ["1.2.3"], ["0.0.0.0"]],
        lambda rng: [_ipv4ish(rng)],
    ),
]


def _roman(n: int) -> str:
    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]  # fmt: skip
    out = []
    for value, numeral in table:
        while n >= value:
            out.append(numeral)
            n -= value
    return "".join(out)
