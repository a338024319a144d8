#!/usr/bin/env python3
"""Fills in what Jinja2 renders: the "want" of every case in cases.json, and
realworld.json.gz's cases (each template in templates/ with each conversation
and set of options in that file).

The environment is the one transformers renders chat templates in
(transformers/utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), with tojson replaced by
json.dumps(ensure_ascii=False, ...) and the globals raise_exception and
strftime_now. AssistantTracker only adds the {% generation %} tag; a stand-in
that renders its body is defined below. strftime_now's clock is fixed at
2024-07-26 09:05:03 to match the Go test.

A case whose render raises gets "error": the exception's message, and no
"want". Run: python3 jinja2_reference.py (Jinja2 3.1.6 made the files).

templates/: chat templates of real models, MIT or Apache-2.0 licensed:
from github.com/chujiezheng/chat_templates (MIT), and DeepSeek-V3.1,
GLM-4.6, Kimi-K2, Phi-4-mini and Mistral-Small-3.1 as llama.cpp keeps them in
models/templates.
"""
import datetime
import gzip
import json
import os

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime(2024, 7, 26, 9, 5, 3).strftime(fmt)


env = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

here = os.path.dirname(os.path.abspath(__file__))


def render(template, variables):
    try:
        return {"want": env.from_string(template).render(**variables)}
    except Exception as e:  # the message the Go error must contain
        return {"error": str(e)}


path = os.path.join(here, "cases.json")
with open(path, encoding="utf-8") as f:
    cases = json.load(f)
for c in cases:
    c.pop("want", None)
    c.pop("error", None)
    c.update(render(c["template"], c.get("vars", {})))
with open(path, "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=False, indent=1)
    f.write("\n")

# realworld.json.gz: the variables transformers passes (messages, tools and
# documents None unless given, add_generation_prompt, special tokens), with
# each options entry's on top.
path = os.path.join(here, "realworld.json.gz")
with gzip.open(path, "rt", encoding="utf-8") as f:
    rw = json.load(f)
rw["cases"] = []
for name in sorted(os.listdir(os.path.join(here, "templates"))):
    with open(os.path.join(here, "templates", name), encoding="utf-8") as f:
        src = f.read()
    for conv, msgs in rw["conversations"].items():
        for opt, extra in rw["options"].items():
            variables = dict(rw["special_tokens"], messages=msgs, tools=None, documents=None)
            variables.update(extra)
            case = {"template": name, "conversation": conv, "options": opt}
            case.update(render(src, variables))
            rw["cases"].append(case)
with gzip.open(path, "wt", encoding="utf-8") as f:
    json.dump(rw, f, ensure_ascii=False, indent=1)
    f.write("\n")
