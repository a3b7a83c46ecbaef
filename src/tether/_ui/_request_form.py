"""A pending request on the run page: what was asked, and the form that responds to it.

Layer: the dashboard (``_ui``).

The fields come from :func:`~._forms.form_for`; every input is a plain text
input, choice or text area, never one the browser validates itself, so what
decides is the server's strict decoding (:func:`~._forms.decode`), whose
error for a field is shown next to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._forms import Field, Form
from ._html import Markup, join, tag

__all__ = ("render_form",)


def _hint(form: Form) -> str:
    if form.tp is None:
        return (
            f"The type {form.type_name} is not known here: type the response as JSON (or plain "
            "text for a string). When you respond, it is checked against the type the "
            "workflow's module names."
        )
    if form.composite:
        return "Each field is decoded strictly into its type; a JSON field takes a JSON value."
    return ""


def _input(field: Field, value: str | None, invalid: bool) -> Markup:
    css = "invalid" if invalid else None
    aria = "true" if invalid else None
    if field.choices:
        if field.kind == "bool":
            return tag(
                "fieldset",
                tag("legend", field.label, tag("small", field.type_name, class_="type")),
                *(
                    tag(
                        "label",
                        tag(
                            "input",
                            type="radio",
                            name=field.name,
                            value=v,
                            checked=v == value,
                            aria_invalid=aria,
                        ),
                        " ",
                        label,
                    )
                    for v, label in field.choices
                ),
                class_=css,
            )
        options = [tag("option", "choose…", value="", disabled=True, selected=value is None)]
        options += [
            tag("option", label, value=v, selected=v == value) for v, label in field.choices
        ]
        control = tag("select", *options, name=field.name, class_=css, aria_invalid=aria)
    elif field.kind == "json":
        control = tag(
            "textarea",
            value or "",
            name=field.name,
            class_=css,
            aria_invalid=aria,
            spellcheck="false",
        )
    else:
        control = tag(
            "input",
            type="text",
            name=field.name,
            value=value or "",
            class_=css,
            aria_invalid=aria,
            autocomplete="off",
            spellcheck="false",
        )
    shown = "JSON" if field.kind == "json" and field.tp is None else field.type_name
    return tag("label", field.label, tag("small", shown, class_="type"), control)


def render_form(
    form: Form,
    payload: Any,
    *,
    run_id: str,
    errors: Mapping[str, str],
    values: Mapping[str, str],
    writable: bool,
    token: Markup,
) -> Markup:
    """One request: its key, payload and expected type; the form when *writable*.

    *errors* are by field name (``""``: the whole response, ``token``: the
    token); *values* are what was submitted, shown again after an error.
    """
    asked = tag("pre", json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False))
    head = join(
        [
            tag(
                "h3",
                tag("code", form.key),
                tag("small", f"expects {form.type_name}", class_="type"),
            ),
            asked,
        ]
    )
    if not writable:
        return tag("section", head, class_="card request", data_key=form.key)
    fields = []
    for field in form.fields:
        value = values.get(field.name, field.default)
        error = errors.get(field.name)
        fields.append(
            tag(
                "div",
                _input(field, value, error is not None),
                tag("p", error, class_="error", data_error=field.name) if error else None,
                class_="field",
                data_field=field.name,
            )
        )
    hint = _hint(form)
    whole = errors.get("")
    body = tag(
        "form",
        tag("input", type="hidden", name="run_id", value=run_id),
        tag("input", type="hidden", name="key", value=form.key),
        tag("p", hint, class_="muted") if hint else None,
        *fields,
        tag("p", whole, class_="error", data_error="") if whole else None,
        token,
        tag("button", "Respond", type="submit"),
        method="post",
        action="/run/answer",
        class_="answer",
        data_key=form.key,
    )
    return tag("section", head, body, class_="card request", data_key=form.key)
