//! Arithmetic for the `calc` tool: a small Pratt parser over `f64`.
//!
//! Grammar: numbers (`12`, `1.5`, `.5`, `2e3`), `+ - * / %`, `^` (or `**`,
//! right associative, binding tighter than unary minus, so `-2^2` is `-4`),
//! parentheses, unary `-`/`+`, the functions `sqrt abs ln log10 round floor
//! ceil` (one argument) and `min max` (one or more), and the constants `pi`
//! and `e`. Errors name the 1-based character position they were found at.

use std::fmt;

/// Input longer than this is refused rather than parsed.
const MAX_INPUT_CHARS: usize = 10_000;
/// Parentheses and unary operators nested deeper than this are refused, so
/// hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 200;

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalcError {
    /// What is wrong.
    pub message: String,
    /// 1-based character position in the expression (0 when it concerns the
    /// whole expression).
    pub position: usize,
}

impl fmt::Display for CalcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.position == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "{} at position {}", self.message, self.position)
        }
    }
}

impl std::error::Error for CalcError {}

fn err<T>(message: impl Into<String>, position: usize) -> Result<T, CalcError> {
    Err(CalcError {
        message: message.into(),
        position,
    })
}

/// Evaluates an arithmetic expression.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    if expression.chars().count() > MAX_INPUT_CHARS {
        return err(
            format!("the expression is longer than {MAX_INPUT_CHARS} characters"),
            0,
        );
    }
    let tokens = lex(expression)?;
    let mut parser = Parser {
        tokens,
        next: 0,
        depth: 0,
    };
    if parser.peek().kind == Kind::End {
        return err("the expression is empty", 0);
    }
    let value = parser.expr(0)?;
    let t = parser.peek();
    if t.kind != Kind::End {
        return err(
            format!("unexpected {} after a complete expression", t.kind),
            t.pos,
        );
    }
    if !value.is_finite() {
        return err("the result is not a finite number", 0);
    }
    Ok(value)
}

/// Formats a result: integers without a fractional part (`42`, not `42.0`),
/// very large or very small magnitudes in exponent form.
pub fn format_number(x: f64) -> String {
    if x == 0.0 {
        return "0".to_string();
    }
    let magnitude = x.abs();
    if !(1e-9..1e21).contains(&magnitude) {
        return format!("{x:e}");
    }
    if x.fract() == 0.0 && magnitude < 9.0e15 {
        // Exact: an integer-valued f64 this small is an exact i64.
        return format!("{}", x as i64);
    }
    format!("{x}")
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Num(f64),
    Ident(String),
    Op(char),
    End,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Num(n) => write!(f, "number {}", format_number(*n)),
            Kind::Ident(s) => write!(f, "name {s:?}"),
            Kind::Op(c) => write!(f, "'{c}'"),
            Kind::End => f.write_str("end of expression"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// 1-based character position.
    pos: usize,
}

fn lex(input: &str) -> Result<Vec<Token>, CalcError> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let pos = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            if i < chars.len() && chars[i] == '.' {
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            // An exponent only when digits follow, so `2e` stays `2` then `e`.
            if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                let mut j = i + 1;
                if j < chars.len() && matches!(chars[j], '+' | '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let text: String = chars[start..i].iter().collect();
            match text.parse::<f64>() {
                Ok(n) => tokens.push(Token {
                    kind: Kind::Num(n),
                    pos,
                }),
                Err(_) => return err(format!("malformed number {text:?}"), pos),
            }
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(Token {
                kind: Kind::Ident(text.to_lowercase()),
                pos,
            });
            continue;
        }
        let op = match c {
            '*' if chars.get(i + 1) == Some(&'*') => {
                i += 1;
                '^'
            }
            '+' | '-' | '*' | '/' | '%' | '^' | '(' | ')' | ',' => c,
            '×' | '·' => '*',
            '÷' => '/',
            '−' => '-',
            _ => return err(format!("unexpected character {c:?}"), pos),
        };
        i += 1;
        tokens.push(Token {
            kind: Kind::Op(op),
            pos,
        });
    }
    tokens.push(Token {
        kind: Kind::End,
        pos: chars.len() + 1,
    });
    Ok(tokens)
}

/// Binding power of unary minus: weaker than `^`, stronger than `*`.
const UNARY_BP: u8 = 5;

fn infix_binding_power(op: char) -> Option<(u8, u8)> {
    match op {
        '+' | '-' => Some((1, 2)),
        '*' | '/' | '%' => Some((3, 4)),
        '^' => Some((8, 7)),
        _ => None,
    }
}

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Token {
        // The lexer always ends the list with `End`, and `bump` never moves
        // past it, so the last token is a safe fallback.
        self.tokens
            .get(self.next)
            .or_else(|| self.tokens.last())
            .cloned()
            .unwrap_or(Token {
                kind: Kind::End,
                pos: 0,
            })
    }

    fn bump(&mut self) -> Token {
        let t = self.peek();
        if t.kind != Kind::End {
            self.next += 1;
        }
        t
    }

    fn expect(&mut self, op: char, what: &str) -> Result<(), CalcError> {
        let t = self.bump();
        if t.kind == Kind::Op(op) {
            Ok(())
        } else {
            err(format!("expected {what}, found {}", t.kind), t.pos)
        }
    }

    fn expr(&mut self, min_bp: u8) -> Result<f64, CalcError> {
        self.depth += 1;
        let result = self.expr_inner(min_bp);
        self.depth -= 1;
        result
    }

    fn expr_inner(&mut self, min_bp: u8) -> Result<f64, CalcError> {
        let t = self.bump();
        if self.depth > MAX_DEPTH {
            return err("the expression is nested too deeply", t.pos);
        }
        let mut lhs = match t.kind {
            Kind::Num(n) => n,
            Kind::Op('-') => -self.expr(UNARY_BP)?,
            Kind::Op('+') => self.expr(UNARY_BP)?,
            Kind::Op('(') => {
                let v = self.expr(0)?;
                self.expect(')', "')'")?;
                v
            }
            Kind::Ident(name) => {
                if self.peek().kind == Kind::Op('(') {
                    self.bump();
                    let args = self.arguments()?;
                    apply_function(&name, &args, t.pos)?
                } else {
                    match name.as_str() {
                        "pi" => std::f64::consts::PI,
                        "e" => std::f64::consts::E,
                        _ => return err(format!("unknown identifier {name:?}"), t.pos),
                    }
                }
            }
            Kind::End => return err("unexpected end of expression", t.pos),
            Kind::Op(c) => {
                return err(
                    format!("expected a number, '(' or a function, found '{c}'"),
                    t.pos,
                );
            }
        };
        loop {
            let t = self.peek();
            let Kind::Op(op) = t.kind else { break };
            let Some((l_bp, r_bp)) = infix_binding_power(op) else {
                break;
            };
            if l_bp < min_bp {
                break;
            }
            self.bump();
            let rhs = self.expr(r_bp)?;
            lhs = apply_operator(op, lhs, rhs, t.pos)?;
        }
        Ok(lhs)
    }

    /// Arguments after the opening parenthesis, through the closing one.
    fn arguments(&mut self) -> Result<Vec<f64>, CalcError> {
        let mut args = Vec::new();
        if self.peek().kind == Kind::Op(')') {
            self.bump();
            return Ok(args);
        }
        loop {
            args.push(self.expr(0)?);
            let t = self.bump();
            match t.kind {
                Kind::Op(',') => continue,
                Kind::Op(')') => return Ok(args),
                other => return err(format!("expected ',' or ')', found {other}"), t.pos),
            }
        }
    }
}

fn apply_operator(op: char, a: f64, b: f64, pos: usize) -> Result<f64, CalcError> {
    let v = match op {
        '+' => a + b,
        '-' => a - b,
        '*' => a * b,
        '/' if b == 0.0 => return err("division by zero", pos),
        '/' => a / b,
        '%' if b == 0.0 => return err("remainder of division by zero", pos),
        '%' => a % b,
        '^' => a.powf(b),
        _ => return err(format!("unknown operator '{op}'"), pos),
    };
    if v.is_finite() {
        Ok(v)
    } else {
        err(
            format!(
                "'{op}' of {} and {} is not a finite number",
                format_number(a),
                format_number(b)
            ),
            pos,
        )
    }
}

fn apply_function(name: &str, args: &[f64], pos: usize) -> Result<f64, CalcError> {
    let one = |f: fn(f64) -> f64| -> Result<f64, CalcError> {
        match args {
            [x] => Ok(f(*x)),
            _ => err(format!("{name} takes 1 argument, got {}", args.len()), pos),
        }
    };
    let v = match name {
        "sqrt" => match args {
            [x] if *x < 0.0 => return err("sqrt of a negative number", pos),
            _ => one(f64::sqrt)?,
        },
        "ln" | "log10" => match args {
            [x] if *x <= 0.0 => {
                return err(format!("{name} of a number that is not positive"), pos);
            }
            _ if name == "ln" => one(f64::ln)?,
            _ => one(f64::log10)?,
        },
        "abs" => one(f64::abs)?,
        "round" => one(f64::round)?,
        "floor" => one(f64::floor)?,
        "ceil" => one(f64::ceil)?,
        "min" | "max" => {
            let Some(first) = args.first() else {
                return err(format!("{name} takes at least 1 argument"), pos);
            };
            let pick = if name == "min" { f64::min } else { f64::max };
            args.iter().fold(*first, |acc, x| pick(acc, *x))
        }
        _ => return err(format!("unknown function {name:?}"), pos),
    };
    if v.is_finite() {
        Ok(v)
    } else {
        err(format!("{name} gave a number that is not finite"), pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn calc(s: &str) -> String {
        format_number(evaluate(s).unwrap())
    }

    #[test]
    fn arithmetic_follows_the_usual_rules() {
        assert_eq!(calc("17*23+4^3"), "455");
        assert_eq!(calc("1 + 2 * 3"), "7");
        assert_eq!(calc("(1 + 2) * 3"), "9");
        assert_eq!(calc("2^3^2"), "512");
        assert_eq!(calc("2**10"), "1024");
        assert_eq!(calc("-2^2"), "-4");
        assert_eq!(calc("(-2)^2"), "4");
        assert_eq!(calc("2^-1"), "0.5");
        assert_eq!(calc("10 - 4 - 3"), "3");
        assert_eq!(calc("100 / 10 / 5"), "2");
        assert_eq!(calc("7 % 3"), "1");
        assert_eq!(calc("--3"), "3");
        assert_eq!(calc("1.5e3 + .5"), "1500.5");
        assert_eq!(calc("0.1 + 0.2"), "0.30000000000000004");
        assert_eq!(calc("6 × 7 ÷ 2"), "21");
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(calc("sqrt(16) + abs(-3)"), "7");
        assert_eq!(calc("min(4, 2, 8) * max(1, 5)"), "10");
        assert_eq!(calc("round(2.5) + floor(2.7) + ceil(2.1)"), "8");
        assert_eq!(calc("log10(1000)"), "3");
        assert_eq!(calc("ln(e)"), "1");
        assert_eq!(calc("round(pi * 100) / 100"), "3.14");
        assert_eq!(calc("2 * e"), format_number(2.0 * std::f64::consts::E));
        // No implicit multiplication: `2e` is a number and then a name.
        assert!(evaluate("2e").is_err());
    }

    #[test]
    fn errors_say_what_and_where() {
        let e = evaluate("1 / 0").unwrap_err();
        assert_eq!((e.message.as_str(), e.position), ("division by zero", 3));
        assert_eq!(e.to_string(), "division by zero at position 3");
        let e = evaluate("2 * foo").unwrap_err();
        assert_eq!(e.message, "unknown identifier \"foo\"");
        assert_eq!(e.position, 5);
        let e = evaluate("1 + 2 3").unwrap_err();
        assert!(e.message.contains("after a complete expression"), "{e}");
        assert_eq!(e.position, 7);
        assert!(evaluate("(1 + 2").unwrap_err().message.contains("')'"));
        assert!(
            evaluate("1 +")
                .unwrap_err()
                .message
                .contains("end of expression")
        );
        assert!(evaluate("").unwrap_err().message.contains("empty"));
        assert!(
            evaluate("sqrt(-1)")
                .unwrap_err()
                .message
                .contains("negative")
        );
        assert!(
            evaluate("ln(0)")
                .unwrap_err()
                .message
                .contains("not positive")
        );
        assert!(
            evaluate("sqrt(1, 2)")
                .unwrap_err()
                .message
                .contains("1 argument")
        );
        assert!(
            evaluate("max()")
                .unwrap_err()
                .message
                .contains("at least 1")
        );
        assert!(
            evaluate("7 % 0")
                .unwrap_err()
                .message
                .contains("division by zero")
        );
        assert!(evaluate("10^400").unwrap_err().message.contains("finite"));
        assert!(evaluate("1 $ 2").unwrap_err().message.contains("'$'"));
        let deep = format!("{}1{}", "(".repeat(3000), ")".repeat(3000));
        assert!(
            evaluate(&deep)
                .unwrap_err()
                .message
                .contains("nested too deeply")
        );
        let deep_minus = "-".repeat(5000) + "1";
        assert!(evaluate(&deep_minus).is_err());
    }

    #[test]
    fn numbers_are_printed_plainly() {
        assert_eq!(format_number(42.0), "42");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(-7.0), "-7");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(1e300), "1e300");
        assert_eq!(format_number(1.5e-12), "1.5e-12");
    }

    proptest! {
        #[test]
        fn sums_of_integers_are_exact(a in any::<i32>(), b in any::<i32>()) {
            let v = evaluate(&format!("{a} + {b}")).unwrap();
            prop_assert_eq!(v, f64::from(a) + f64::from(b));
            prop_assert_eq!(format_number(v), (i64::from(a) + i64::from(b)).to_string());
            // Unary minus on the right-hand side, without spaces.
            let v = evaluate(&format!("{a}-{b}")).unwrap();
            prop_assert_eq!(v, f64::from(a) - f64::from(b));
        }

        #[test]
        fn precedence_matches_rust(a in -1000i32..1000, b in -1000i32..1000, c in 1i32..1000) {
            let (fa, fb, fc) = (f64::from(a), f64::from(b), f64::from(c));
            prop_assert_eq!(evaluate(&format!("{a} + {b} * {c}")).unwrap(), fa + fb * fc);
            prop_assert_eq!(evaluate(&format!("({a} - {b}) / {c}")).unwrap(), (fa - fb) / fc);
            prop_assert_eq!(evaluate(&format!("{a} % {c} - {b}")).unwrap(), fa % fc - fb);
        }

        #[test]
        fn parser_never_panics(s in any::<String>()) {
            let _ = evaluate(&s);
        }

        #[test]
        fn parser_never_panics_on_expression_like_text(s in "[0-9a-z+*/%^(),. -]{0,64}") {
            if let Ok(v) = evaluate(&s) {
                prop_assert!(v.is_finite());
            }
        }
    }
}
