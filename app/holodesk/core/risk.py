"""Risk classification of actions, used by the approval policy (field cases F11, F23).

The rules are an allowlist: an action is LOW risk only when it is positively known to be harmless, and
everything else is HIGH (the autopilot asks the user). LOW risk is:

* ``wait``, ``plan`` (the model's ``update_plan``), ``answer`` and ``done`` (they touch nothing);
* a pointer action (a click of any button and count, move, drag, scroll) on windows that are known and
  are not terminal emulators: the windows under each of its points when those were probed (a drag of
  text onto a terminal pastes it there), else the focused window; and, except for a plain move, none of
  its points on a window's frame (the window manager's title bar and its close/minimise/maximise
  buttons, when the probe knows the client area), and for an action that presses a button over its target
  (:attr:`~holodesk.core.actions.Action.presses`: a click, a drag) a target (the model's ``element``) whose
  words name no action from :data:`RISKY_TARGET_WORDS` (delete, submit, close, pay, install, ...). A reply
  without ``element`` (holo-v1) is judged by the windows alone: its target cannot be known in words, and
  asking for every such click would make the autopilot ask for all of them;
* typed text that is one line of printable characters (:meth:`str.isprintable`: no line break, tab,
  NUL, escape sequence, bidi override or other control/format character), into a known, non-terminal
  focused window;
* a key chord from :data:`LOW_RISK_CHORDS` (navigation: arrows, Tab, Home/End, PageUp/PageDown alone
  or with Shift and/or Ctrl, and Ctrl+A), into a known, non-terminal focused window.

The real elements join the model's words when the accessibility tree names them
(:class:`~holodesk.core.element.Element`, from :mod:`holodesk.control.accessibility`): a press or a scroll
asks when the element under a point is a terminal, is disabled, names a risky action, or has a name that
shares no word with the model's words for its target ("the model says ‘Keep’; the push button ‘Delete
all files’ is there"); a scroll asks over a selector (combo box, spin button, slider, tab strip, ...: a
wheel notch changes its value) and over words that name one or a risky action; typed text asks unless the
focused element is an editable text field (a space on a focused button or menu item presses it), and keys
ask in a focused terminal. Without a focused element (a program without accessibility), text of spaces only
and text with non-ASCII characters ask (a terminal that cannot be ruled out may read 8-bit characters as
Meta chords). Typed text and Delete/Backspace over a possible selection (:func:`selection_after`: after
Ctrl+A, Shift+navigation, a double click or a drag) ask: they replace what is selected.

Target words are compared after :func:`fold_words` (NFKC, invisible characters removed, look-alike letters
mapped by Unicode's confusables table, case-folded) in English and the languages of
:data:`RISKY_TARGET_WORDS_BY_LANGUAGE`. Any action type the rules do not know (its exact class is not in
``_RULES``, a subclass of a known one included) asks.

Everything else asks, with a plain-words reason: any action that touches the screen or keyboard while the
focused window is unknown (the focus probe returned nothing: no window manager, a Wayland session) or is a
terminal (for typing and keys, the focused element's window stands in for an unknown focused window when it
states that it is active: :attr:`~holodesk.core.element.Element.active_window`, GNOME Wayland); a middle click
(it pastes the X11 selection); any other key or chord, among them every name of Enter (Enter/Return, Ctrl+M
and Ctrl+J in terminals, Ctrl+Enter, Shift+Enter), paste (Ctrl+V, Ctrl+Shift+V, Shift+Insert), close and quit
(Ctrl+W, Alt+F4, Cmd+Q), delete (Delete, Backspace), Escape (it discards an open draft in many web editors and
dialogs) and Space (it presses the focused button). Single characters are typed with ``type``, not pressed as
keys, so a key press of a character asks too.

Keys held across steps: ``key_down`` always asks (a held key changes every click and key that follows:
Shift+click extends a selection, Ctrl+click opens a link in a new tab, a held Super or Alt reaches the window
manager), and while keys are held (``held_keys``) every action that touches the screen or keyboard asks, its
reason naming them; ``key_up`` is LOW (the end of the run releases the keys anyway). A chord with taps
(``hold_and_tap``) is LOW only when every held-keys-plus-tap chord is on :data:`LOW_RISK_CHORDS`.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confusable_homoglyphs import confusables

from holodesk.core.actions import (
    OFF_SCREEN_TYPES,
    Action,
    Click,
    Drag,
    Key,
    KeyDown,
    KeyUp,
    Move,
    Scroll,
    Type,
    handler_for,
)
from holodesk.core.element import SELECTOR_ROLES, Element
from holodesk.core.text import display_safe

TERMINAL_WINDOW_CLASSES = frozenset(
    {
        "xterm", "uxterm", "gnome-terminal", "gnome-terminal-server", "konsole", "xfce4-terminal",
        "terminator", "tilix", "alacritty", "kitty", "wezterm", "foot", "footclient", "urxvt", "rxvt",
        "st", "lxterminal", "mate-terminal", "terminal", "iterm2", "windowsterminal", "cmd", "powershell",
        "pwsh", "conhost", "tabby", "hyper", "ghostty", "guake", "yakuake", "tilda", "termite",
        "terminology", "sakura", "qterminal", "deepin-terminal", "cool-retro-term", "contour", "rio",
        "warp", "blackbox", "ptyxis", "console", "kgx", "terminus", "extraterm", "mintty", "putty",
    }
)
"""Window classes / app ids of terminal emulators, lower case. A WM_CLASS names a terminal when one of
its words (split at spaces and dots) is in this set, is in it before a ``-`` suffix (``st-256color``,
``rxvt-unicode``), ends in ``term`` (``xterm``, ``mlterm``, ``wezterm``), or contains ``terminal``.
This one classifier decides both the risk of keyboard actions (F11) and the paste chord (F15)."""

NAVIGATION_KEYS = frozenset({"up", "down", "left", "right", "home", "end", "pageup", "pagedown", "tab"})
"""Keys that move the caret, the selection, the focus or the view, and nothing else."""
_NAVIGATION_MODIFIER_SETS: tuple[frozenset[str], ...] = (
    frozenset(), frozenset({"shift"}), frozenset({"ctrl"}), frozenset({"ctrl", "shift"}))
"""Modifiers allowed with a navigation key: Shift extends the selection, Ctrl moves by word/page/tab."""

LOW_RISK_CHORDS: frozenset[frozenset[str]] = frozenset(
    {mods | {key} for key in NAVIGATION_KEYS for mods in _NAVIGATION_MODIFIER_SETS} | {frozenset({"ctrl", "a"})}
)
"""The key chords (as sets of normalised key names) the autopilot may press without asking: a navigation
key alone or with Shift, Ctrl or Ctrl+Shift, and Ctrl+A (select all). Every other chord asks."""

_ENTER_CHORDS = (frozenset({"enter"}), frozenset({"ctrl", "m"}), frozenset({"ctrl", "j"}))
"""Enter, and the control characters terminals read as Enter (Ctrl+M = CR, Ctrl+J = LF)."""
_PASTE_CHORDS = (frozenset({"ctrl", "v"}), frozenset({"cmd", "v"}), frozenset({"shift", "insert"}))
_CLOSE_KEYS = frozenset({"w", "q", "f4"})
_DELETE_KEYS = frozenset({"delete", "backspace"})
_COMMAND_MODIFIERS = frozenset({"ctrl", "cmd", "super", "win", "alt", "altgr", "option"})


RISKY_TARGET_WORDS: dict[str, tuple[str, ...]] = {
    "delete something": (
        "delete", "remove", "erase", "trash", "bin", "wipe", "destroy", "purge", "clear", "empty", "discard",
        "drop", "format", "reset", "overwrite", "replace", "uninstall", "revert", "undo", "cut", "unsubscribe"),
    "submit or send something": (
        "submit", "send", "post", "publish", "reply", "forward", "share", "upload", "ok", "okay", "confirm",
        "accept", "agree", "allow", "grant", "apply", "save", "yes", "continue", "proceed", "next", "finish",
        "commit", "merge", "push", "approve", "sign", "login", "log in", "sign in", "register", "enter"),
    "close or quit something": (
        "close", "quit", "exit", "cancel", "dismiss", "x", "\u00d7", "\u2715", "\u2716", "log out", "logout",
        "log off", "sign out", "signout", "shut down", "shutdown", "power off", "restart", "reboot", "lock",
        "suspend", "hibernate", "kill", "terminate", "end task", "stop", "leave", "disconnect"),
    "pay or buy something": (
        "pay", "payment", "buy", "purchase", "order", "checkout", "check out", "subscribe", "donate", "bid",
        "book", "transfer", "place order", "add to cart"),
    "install or run something": (
        "install", "update", "upgrade", "download", "run", "execute", "launch", "open terminal", "grant access",
        "enable", "disable", "authorize", "authorise", "trust", "start"),
}
"""What a click target's words may do, and the words (whole words or phrases, any case, each in its
inflected forms: ``delete``, ``deletes``, ``deleted``, ``deleting``) that say it. A click, double click,
right click or drag whose ``element`` holds one of them asks, even in a known window: buttons and links
that submit, send, delete, close, quit, pay, confirm, install or run are where one click does harm that
cannot be undone. The list is deliberately broad (``OK``, ``Yes``, ``Next`` and ``Continue`` may submit
a form or a wizard page; ``X`` and ``×`` label close buttons): a target that merely mentions such a word
asks too, which costs a keypress, while a missed one costs the user's data."""


RISKY_TARGET_WORDS_BY_LANGUAGE: dict[str, dict[str, tuple[str, ...]]] = {
    "de": {
        "delete something": (
            "löschen", "lösche", "gelöscht", "alle löschen", "entfernen", "entferne", "entfernt", "leeren",
            "papierkorb", "verwerfen", "zurücksetzen", "formatieren", "überschreiben", "ersetzen",
            "deinstallieren", "ausschneiden", "rückgängig"),
        "submit or send something": (
            "senden", "absenden", "sende", "abschicken", "speichern", "bestätigen", "übernehmen", "anwenden",
            "ja", "weiter", "fertig", "akzeptieren", "zustimmen", "erlauben", "veröffentlichen", "hochladen",
            "anmelden", "einloggen", "teilen", "antworten"),
        "close or quit something": (
            "schließen", "schliessen", "beenden", "abbrechen", "verlassen", "abmelden", "ausloggen",
            "herunterfahren", "ausschalten", "neu starten", "neustart", "sperren", "stopp", "stoppen", "trennen"),
        "pay or buy something": (
            "bezahlen", "zahlen", "kaufen", "jetzt kaufen", "bestellen", "zur kasse", "abonnieren", "spenden",
            "überweisen", "buchen", "in den warenkorb"),
        "install or run something": (
            "installieren", "aktualisieren", "herunterladen", "ausführen", "starten", "aktivieren",
            "deaktivieren", "vertrauen", "zulassen"),
    },
    "fr": {
        "delete something": (
            "supprimer", "supprime", "supprimé", "supprimez", "effacer", "efface", "effacez", "retirer", "vider",
            "corbeille", "jeter", "réinitialiser", "formater", "écraser", "remplacer", "désinstaller", "couper"),
        "submit or send something": (
            "envoyer", "envoi", "envoyez", "soumettre", "valider", "publier", "enregistrer", "sauvegarder",
            "confirmer", "accepter", "autoriser", "appliquer", "oui", "continuer", "suivant", "terminer",
            "partager", "répondre", "se connecter", "connexion"),
        "close or quit something": (
            "fermer", "quitter", "annuler", "déconnexion", "se déconnecter", "éteindre", "redémarrer",
            "verrouiller", "arrêter", "arrêt"),
        "pay or buy something": (
            "payer", "paiement", "acheter", "commander", "s'abonner", "abonner", "faire un don", "virement",
            "réserver", "ajouter au panier"),
        "install or run something": (
            "installer", "mettre à jour", "télécharger", "exécuter", "lancer", "démarrer", "activer",
            "désactiver", "faire confiance"),
    },
    "es": {
        "delete something": (
            "eliminar", "elimina", "eliminado", "borrar", "borra", "suprimir", "quitar", "vaciar", "papelera",
            "descartar", "restablecer", "formatear", "sobrescribir", "reemplazar", "desinstalar", "cortar",
            "deshacer"),
        "submit or send something": (
            "enviar", "envía", "envia", "publicar", "guardar", "confirmar", "aceptar", "permitir", "aplicar",
            "sí", "continuar", "siguiente", "finalizar", "compartir", "responder", "iniciar sesión",
            "registrarse"),
        "close or quit something": (
            "cerrar", "salir", "cancelar", "cerrar sesión", "apagar", "reiniciar", "bloquear", "detener",
            "terminar", "desconectar"),
        "pay or buy something": (
            "pagar", "pago", "comprar", "realizar pedido", "suscribirse", "donar", "transferir", "reservar",
            "añadir al carrito"),
        "install or run something": (
            "instalar", "actualizar", "descargar", "ejecutar", "iniciar", "activar", "desactivar", "confiar"),
    },
    "it": {
        "delete something": (
            "elimina", "eliminare", "cancella", "cancellare", "rimuovi", "rimuovere", "svuota", "cestino",
            "scarta", "ripristina", "formatta", "sovrascrivi", "sostituisci", "disinstalla", "taglia"),
        "submit or send something": (
            "invia", "inviare", "pubblica", "salva", "conferma", "accetta", "consenti", "applica", "sì",
            "continua", "avanti", "fine", "condividi", "rispondi", "accedi"),
        "close or quit something": (
            "chiudi", "esci", "annulla", "disconnetti", "spegni", "riavvia", "blocca", "arresta", "termina"),
        "pay or buy something": (
            "paga", "pagamento", "acquista", "compra", "ordina", "abbonati", "dona", "bonifico", "prenota",
            "aggiungi al carrello"),
        "install or run something": (
            "installa", "aggiorna", "scarica", "esegui", "avvia", "attiva", "disattiva", "fidati"),
    },
    "pt": {
        "delete something": (
            "excluir", "apagar", "eliminar", "remover", "esvaziar", "lixeira", "lixo", "descartar", "redefinir",
            "formatar", "substituir", "desinstalar", "recortar", "desfazer"),
        "submit or send something": (
            "enviar", "publicar", "salvar", "guardar", "confirmar", "aceitar", "permitir", "aplicar", "sim",
            "continuar", "próximo", "seguinte", "concluir", "compartilhar", "partilhar", "responder", "entrar"),
        "close or quit something": (
            "fechar", "sair", "cancelar", "desligar", "reiniciar", "bloquear", "parar", "encerrar", "desconectar"),
        "pay or buy something": (
            "pagar", "pagamento", "comprar", "finalizar compra", "assinar", "doar", "transferir", "reservar",
            "adicionar ao carrinho"),
        "install or run something": (
            "instalar", "atualizar", "baixar", "executar", "iniciar", "ativar", "desativar", "confiar"),
    },
    "ru": {
        "delete something": (
            "удалить", "удали", "удаление", "удалено", "стереть", "очистить", "корзина", "сбросить",
            "форматировать", "перезаписать", "заменить", "вырезать"),
        "submit or send something": (
            "отправить", "опубликовать", "сохранить", "подтвердить", "принять", "разрешить", "применить", "да",
            "продолжить", "далее", "готово", "войти", "поделиться", "ответить"),
        "close or quit something": (
            "закрыть", "выйти", "выход", "отмена", "отменить", "выключить", "перезагрузить", "заблокировать",
            "остановить", "завершить", "отключить"),
        "pay or buy something": (
            "оплатить", "оплата", "купить", "заказать", "оформить заказ", "подписаться", "пожертвовать",
            "перевести", "забронировать", "в корзину"),
        "install or run something": (
            "установить", "обновить", "скачать", "загрузить", "выполнить", "запустить", "включить", "доверять"),
    },
}
""":data:`RISKY_TARGET_WORDS` in the desktop languages Holodesk knows besides English, by ISO 639-1 code,
each word in the forms a label uses (infinitive, imperative, noun). Every language's words are checked
for every target, whatever the desktop's locale: a web page or a document may be in any of them.
:func:`languages_without_words` names the user's languages that have no list here."""

_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")
"""Characters that render as nothing but are not of Unicode category Cf (Cf is removed as a whole)."""


@functools.lru_cache(maxsize=4096)
def _latin_lookalike(ch: str) -> str:
    """``ch``'s ASCII look-alike from Unicode's confusables table (Cyrillic ``е`` -> ``e``, Greek ``Ο`` ->
    ``O``), or ``ch`` itself when it has none; the table is the ``confusable_homoglyphs`` package's copy."""
    if ch.isascii():
        return ch
    found = confusables.is_confusable(ch, preferred_aliases=["latin"])
    if found:
        for glyph in found[0]["homoglyphs"]:
            if glyph["c"].isascii():
                return str(glyph["c"])
    return ch


def fold_words(text: str) -> str:
    """``text`` as the word rules compare it: NFKC-normalised (fullwidth ``Ｄｅｌｅｔｅ`` -> ``Delete``,
    ligatures split), with invisible characters removed (category Cf: zero-width spaces and joiners, bidi
    marks, soft hyphens; Hangul fillers), each character with an ASCII look-alike replaced by it
    (``Delеte`` with a Cyrillic ``е`` -> ``Delete``), and case-folded (``ß`` -> ``ss``). The risky word
    lists are folded the same way, so words in Cyrillic or Greek script still match themselves."""
    return _fold_with_sources(text)[0]


def _fold_with_sources(text: str) -> tuple[str, str, list[int]]:
    """:func:`fold_words` of ``text``, the NFKC form of ``text``, and for each folded character the index of
    the NFKC character it comes from (to quote a match as the target writes it)."""
    nfkc = unicodedata.normalize("NFKC", text)
    folded: list[str] = []
    sources: list[int] = []
    for index, ch in enumerate(nfkc):
        if unicodedata.category(ch) == "Cf" or ch in _INVISIBLE:
            continue
        out = _latin_lookalike(ch).casefold()
        folded.append(out)
        sources.extend([index] * len(out))
    return "".join(folded), nfkc, sources


def user_languages(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The desktop's languages (ISO 639-1 codes, most preferred first) from ``LANGUAGE`` (a colon-separated
    list), ``LC_ALL``, ``LC_MESSAGES`` and ``LANG`` (``de_DE.UTF-8`` -> ``de``); ``C`` and ``POSIX`` name
    none."""
    found: list[str] = []
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        for entry in environ.get(name, "").split(":"):
            code = re.split(r"[_.@]", entry, maxsplit=1)[0].lower()
            if code and code not in ("c", "posix") and code not in found:
                found.append(code)
    return tuple(found)


def languages_without_words(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The user's languages (:func:`user_languages`) for which the word rules have no list: targets named
    in them are judged by the English and known-language words alone."""
    known = {"en", *RISKY_TARGET_WORDS_BY_LANGUAGE}
    return tuple(code for code in user_languages(environ) if code not in known)


def _forms(word: str) -> set[str]:
    """``word`` and its inflections (-s, -es, -d, -ed, -ing, e-dropping and consonant doubling); a
    phrase is matched as written, with any spaces, hyphens or underscores between its words."""
    if " " in word or not word.isalpha() or len(word) < 3:
        return {word}
    forms = {word, word + "s", word + "es", word + "d", word + "ed", word + "ing", word + "er"}
    if word.endswith("e"):
        forms.add(word[:-1] + "ing")
    if word[-1] not in "aeiouwxy":
        forms |= {word + word[-1] + "ing", word + word[-1] + "ed"}
    return forms


def _phrase_pattern(phrase: str) -> str:
    return r"[\s_-]+".join(re.escape(part) for part in phrase.split())


def _kind_pattern(what: str) -> re.Pattern[str]:
    """One whole-word pattern over the folded (:func:`fold_words`) forms of every word of kind ``what``."""
    words = {fold_words(f) for w in RISKY_TARGET_WORDS[what] for f in _forms(w)}
    words |= {fold_words(w) for language in RISKY_TARGET_WORDS_BY_LANGUAGE.values() for w in language[what]}
    return re.compile(r"(?<![^\W_])(?:" + "|".join(sorted((_phrase_pattern(w) for w in words), key=len, reverse=True))
                      + r")(?![^\W_])")


_RISKY_TARGET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, _kind_pattern(what)) for what in RISKY_TARGET_WORDS)
""":data:`RISKY_TARGET_WORDS` and :data:`RISKY_TARGET_WORDS_BY_LANGUAGE` compiled: one whole-word pattern
per kind of effect, matched against :func:`fold_words` of a target."""

def target_risk(element: str | None) -> str | None:
    """Why a click on ``element`` (the model's words for its target) asks, or None when its words name
    nothing from :data:`RISKY_TARGET_WORDS`; e.g. ``"the target ‘Delete all files button’ may delete
    something (it says ‘Delete’)"``."""
    found = risky_words(element)
    if found is None:
        return None
    word, what = found
    return f"the target \u2018{display_safe(element or '')}\u2019 may {what} (it says \u2018{display_safe(word)}\u2019)"


def risky_words(text: str | None) -> tuple[str, str] | None:
    """The first risky word in ``text`` compared folded (:func:`fold_words`: ``Ｄｅｌеｔｅ`` reads ``delete``),
    as ``text`` writes it (NFKC-normalised), and the kind of effect it names (a key of
    :data:`RISKY_TARGET_WORDS`); None when it names none."""
    if not text:
        return None
    folded, nfkc, sources = _fold_with_sources(text)
    hits = [(found.start(), -len(found.group(0)), found.end(), what)
            for what, pattern in _RISKY_TARGET_PATTERNS if (found := pattern.search(folded))]
    if not hits:
        return None
    start, _, end, what = min(hits)  # the first word in the target; at one place, the longest phrase
    return nfkc[sources[start]:sources[end - 1] + 1], what


_FILLER_WORDS = frozenset({"the", "a", "an", "button", "field", "link", "menu", "item", "icon", "tab", "box", "of",
                           "in", "on", "at", "to", "for", "and", "or", "with", "text", "label", "entry", "input",
                           "option", "checkbox", "check", "radio", "list", "area", "panel", "window", "dialog",
                           "toolbar", "bar", "row", "cell", "this", "that", "it", "here", "there"})
"""Words a model uses to say what kind of element it means; they carry no name."""


def names_disagree(said: str | None, real_name: str) -> bool:
    """True when the model's words for a target (``said``) and the element's real accessible name share no
    word (after :func:`fold_words`, ignoring kind words such as "button" and "the"): the model says
    "Cancel", the button there is "Delete all files". False when either has no words to compare."""
    if not said or not real_name:
        return False
    said_words = set(re.findall(r"[^\W_]+", fold_words(said))) - _FILLER_WORDS
    real_words = set(re.findall(r"[^\W_]+", fold_words(real_name))) - _FILLER_WORDS
    if not said_words or not real_words:
        return False
    return not said_words & real_words


class Risk(StrEnum):
    """Approval class of an action."""

    LOW = "low"
    HIGH = "high"


@dataclass(frozen=True)
class RiskAssessment:
    """Risk level and the plain-words reason shown on the approval card and the terminal prompt.

    Attributes:
        level: LOW (the autopilot may approve it) or HIGH (the user is always asked).
        reason: why, in plain words; for HIGH it says why the step asks (e.g. "Ctrl+M acts as Enter:
            it may submit a form or run a command").
    """

    level: Risk
    reason: str


def is_terminal(window_class: str | None) -> bool:
    """True when the focused window's class/name looks like a terminal emulator
    (rules at :data:`TERMINAL_WINDOW_CLASSES`)."""
    if not window_class:
        return False
    low = window_class.lower()
    if "terminal" in low:
        return True
    for word in re.split(r"[\s.]+", low):
        if not word:
            continue
        if word in TERMINAL_WINDOW_CLASSES or word.split("-", 1)[0] in TERMINAL_WINDOW_CLASSES:
            return True
        if word.endswith("term"):
            return True
    return False


def chord_name(keys: tuple[str, ...]) -> str:
    """A chord as people write it: ``("ctrl", "shift", "v")`` -> ``"Ctrl+Shift+V"``."""
    return "+".join(k.upper() if len(k) == 1 else k.capitalize() for k in keys)


def _chord_reason(keys: tuple[str, ...]) -> str:
    """Why a chord that is not on :data:`LOW_RISK_CHORDS` asks."""
    name = chord_name(keys)
    chord = frozenset(keys)
    if "enter" in chord or chord in _ENTER_CHORDS:
        extra = " (terminals read it as Enter)" if "enter" not in chord else ""
        return f"{name} may submit a form or run a command{extra}"
    if chord in _PASTE_CHORDS or ("v" in chord and chord & {"ctrl", "cmd"}):
        return f"{name} pastes the clipboard, which may run a command in a terminal"
    if chord & _CLOSE_KEYS and chord & _COMMAND_MODIFIERS:
        return f"{name} may close a window or tab, or quit an application"
    if chord & _DELETE_KEYS:
        return f"{name} may delete something"
    if chord == {"esc"}:
        return "Escape may cancel a dialog or discard a draft"
    return f"{name} is not on the list of keys known to be harmless (arrows, Tab, Home/End, Page Up/Down, Ctrl+A)"


def _window_reason(focused_window: str | None, doing: str, focused: Element | None = None) -> str | None:
    """The reason to ask because of the focused window, or None when it is known and not a terminal. Where the
    desktop does not name it (GNOME Wayland), the window of the ``focused`` element names it when that window
    states that it is active (:attr:`Element.active_window`), by its application's name."""
    if not focused_window and focused is not None and focused.active_window:
        if is_terminal(focused.application):
            return f"{doing} in a terminal ({display_safe(focused.application)})"
        return None
    if not focused_window:
        return f"{doing}, and the focused window is unknown (Holodesk cannot tell whether it is a terminal)"
    if is_terminal(focused_window):
        return f"{doing} in a terminal ({display_safe(focused_window)})"
    return None


def selection_after(action: Action, before: bool) -> bool:
    """Whether a text selection may exist after ``action`` is performed, given whether one may exist before
    it (``before``): Ctrl+A, a Shift+navigation chord, a double or triple click (it selects a word or a line) and
    a drag (it selects text) make one; a click, an unshifted navigation key and typed text collapse it; other actions
    leave it as it was. A typed character or Delete over a selection replaces what is selected."""
    if isinstance(action, Key):
        chord = frozenset((*action.keys, *action.taps))
        if chord == {"ctrl", "a"} or ("shift" in chord and chord & NAVIGATION_KEYS):
            return True
        if chord in LOW_RISK_CHORDS:
            return False
        return before
    if isinstance(action, Drag) or (isinstance(action, Click) and action.count > 1):
        return True
    if isinstance(action, (Click, Type)):
        return False
    return before


def assess(action: Action, *, focused_window: str | None = None,
           pointer_windows: Sequence[str | None] | None = None, on_window_frame: bool = False,
           pointer_elements: Sequence[Element | None] | None = None, focused_element: Element | None = None,
           selection: bool = False, input_grab: str | None = None, own_menu: bool = False,
           held_keys: Sequence[str] = ()) -> RiskAssessment:
    """Classify one action by the allowlist in this module's docstring.

    Args:
        action: the proposed action.
        focused_window: WM_CLASS (or app id) of the window that has keyboard focus; None or "" when it
            is unknown, which makes every action that touches the screen or keyboard HIGH.
        pointer_windows: for an action with points, the WM_CLASS of the window under each point, in
            the order of :meth:`Action.points` (None for a point where it is unknown, which makes the
            action HIGH); None when not probed, and then the focused window decides.
        on_window_frame: True when one of the action's points lies on a window's frame (title bar,
            border, the window manager's close/minimise/maximise buttons) rather than in its client area.
        pointer_elements: the accessible element under each of the action's points (None where the
            accessibility tree says nothing there: the word and window rules alone decide); None when not
            looked up.
        focused_element: the accessible element with the keyboard focus, or None when unknown.
        selection: True when a text selection may exist (:func:`selection_after` over the performed steps).
        input_grab: why keys or clicks may not go where the card says (another client holds the keyboard
            or pointer grab: an open menu, a hidden window), or None; any action that touches the screen or
            keyboard then asks.
        own_menu: True when the program the step acts in holds the keyboard and pointer grabs itself (its open
            menu: :class:`holodesk.control.grabs.GrabWatcher`): a pointer action then asks unless the element
            under each of its points is known, and typed text asks (a letter may activate a menu item by its
            mnemonic); navigation keys are judged as usual (the focused element is the highlighted item).
        held_keys: the keys held down now by an earlier ``key_down`` (canonical names); while any is held,
            every action that touches the screen or keyboard but ``key_up`` asks.
    Returns:
        LOW only for actions known to be harmless; HIGH, with the reason the user is asked, for all else.
    """
    rule = handler_for(_RULES, action)
    if rule is None:
        return RiskAssessment(Risk.HIGH, "the safety rules do not know the action type "
                              f"\u2018{display_safe(action.kind)}\u2019 ({type(action).__name__})")
    if rule is _touches_nothing or isinstance(action, (KeyUp, KeyDown)):
        return rule(action, _Context())
    if held_keys:
        return RiskAssessment(Risk.HIGH, f"{chord_name(tuple(held_keys))} "
                              f"{'is' if len(held_keys) == 1 else 'are'} held down, so this acts with "
                              f"{'it' if len(held_keys) == 1 else 'them'} (a {chord_name(tuple(held_keys))}+click "
                              "or chord)")
    if isinstance(action, Click) and action.button == "middle":
        # On X11 a middle click pastes the selected text where the pointer is: into a terminal that runs
        # it, whatever window has the focus.
        return RiskAssessment(Risk.HIGH, "a middle click pastes the selected text (Linux) where the pointer is")
    if input_grab is not None:
        return RiskAssessment(Risk.HIGH, input_grab)
    if own_menu and isinstance(action, Type) and not (focused_element is not None and focused_element.editable_text):
        return RiskAssessment(Risk.HIGH, "types into an open menu (a letter may choose an item by its underlined "
                              "letter)" + (f": the focused element is a {focused_element.describe()}"
                                           if focused_element is not None else ""))
    if own_menu and action.points() and not isinstance(action, Move) and \
            (pointer_elements is None or any(e is None for e in pointer_elements)):
        return RiskAssessment(Risk.HIGH, "acts with the pointer while a menu is open, and the element under the "
                              "pointer is not known")
    return rule(action, _Context(focused_window, pointer_windows, on_window_frame, pointer_elements, focused_element,
                                 selection))


@dataclass(frozen=True)
class _Context:
    """What :func:`assess` knows about the desktop around an action (its arguments of the same names)."""

    focused_window: str | None = None
    pointer_windows: Sequence[str | None] | None = None
    on_window_frame: bool = False
    pointer_elements: Sequence[Element | None] | None = None
    focused_element: Element | None = None
    selection: bool = False


def _touches_nothing(action: Action, context: _Context) -> RiskAssessment:
    return RiskAssessment(Risk.LOW, "does not touch the screen")


def _assess_key_up(action: KeyUp, context: _Context) -> RiskAssessment:
    return RiskAssessment(Risk.LOW, f"releases the held {chord_name(action.keys)}")


def _assess_key_down(action: KeyDown, context: _Context) -> RiskAssessment:
    return RiskAssessment(Risk.HIGH, f"holds {chord_name(action.keys)} down for the next steps: every click and "
                          "key that follows acts with it (Shift+click extends a selection, Ctrl+click opens "
                          "a link) until it is released")


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"


def _assess_typing(action: Type, context: _Context) -> RiskAssessment:
    """:func:`assess` for a type action: LOW only for one line of printable text typed into a known window
    that is not a terminal, into an editable text field when the accessibility tree names the focused
    element, with no selection it would replace; text that is only spaces, or holds non-ASCII characters,
    asks unless the focused element is known to be an editable text field."""
    focused, selection = context.focused_element, context.selection
    window = _window_reason(context.focused_window, "types text", focused)
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    if focused is not None and focused.terminal:
        return RiskAssessment(Risk.HIGH, f"types text in a terminal ({focused.describe()})")
    if focused is not None and not focused.editable_text:
        return RiskAssessment(Risk.HIGH, f"the focused element is a {focused.describe()}, not an editable text "
                              "field: typed characters (a space, Enter) may press or change it")
    if any(ch in _LINE_BREAKS for ch in action.text):
        return RiskAssessment(Risk.HIGH, "the text contains a line break, which may submit or run it")
    if not action.text.isprintable():
        return RiskAssessment(Risk.HIGH, "the text contains control or invisible characters "
                              "(shown as escapes), which may act as keys")
    if action.replace:
        return RiskAssessment(Risk.HIGH, "replaces everything the field holds (select-all, then the text)")
    if selection:
        return RiskAssessment(Risk.HIGH, "a selection may exist (after select-all, Shift+arrows, a double click or "
                              "a drag): typing replaces the selected text")
    if focused is None:
        if not action.text.strip():
            return RiskAssessment(Risk.HIGH, "types only spaces, and the focused element is unknown: a space "
                                  "presses a focused button or menu item")
        if not action.text.isascii():
            return RiskAssessment(Risk.HIGH, "the text holds non-ASCII characters, and the focused element is "
                                  "unknown: a terminal may read them as Meta (Alt) key chords")
    return RiskAssessment(Risk.LOW, "types one line of text")


def _assess_keys(action: Key, context: _Context) -> RiskAssessment:
    """:func:`assess` for a key action: LOW only for a chord on :data:`LOW_RISK_CHORDS` pressed in a known
    window that is not a terminal (with taps: every chord of the held keys and one tapped key)."""
    chords = [(*action.keys, tap) for tap in action.taps] if action.taps else [action.keys]
    for chord in chords:
        if frozenset(chord) not in LOW_RISK_CHORDS:
            return RiskAssessment(Risk.HIGH, _chord_reason(chord))
    focused = context.focused_element
    window = _window_reason(context.focused_window, f"presses {chord_name(action.keys)}", focused)
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    if focused is not None and focused.terminal:
        return RiskAssessment(Risk.HIGH, f"presses {chord_name(action.keys)} in a terminal ({focused.describe()})")
    return RiskAssessment(Risk.LOW, "navigation key")


def _element_reason(action: Action, element: Element) -> str | None:
    """Why a pointer action asks because of the real ``element`` under its point, or None."""
    if element.terminal:
        return f"acts with the pointer in a terminal ({element.describe()})"
    if isinstance(action, Scroll):
        if element.role in SELECTOR_ROLES:
            return f"a scroll over a {element.describe()} may change its value"
        return None
    if not action.presses:
        return None
    if element.disabled:
        return f"the {element.describe()} there is disabled: the model may not see what it is"
    found = risky_words(element.name)
    said = getattr(action, "element", None)
    effect = f" (it may {found[1]})" if found is not None else ""
    if names_disagree(said, element.name):
        return f"the model says \u2018{display_safe(said or '')}\u2019; the {element.describe()} is there{effect}"
    if found is not None:
        return f"the {element.describe()} there may {found[1]} (it says \u2018{display_safe(found[0])}\u2019)"
    return None


def _assess_pointer(action: Action, context: _Context) -> RiskAssessment:
    """:func:`assess` for a pointer action (click, move, drag, scroll): HIGH for a
    pressing or scrolling action whose model words or real element (:func:`_element_reason`) are risky, on
    a window's frame, or where the window under a point (else the focused window) is unknown or a terminal;
    LOW otherwise."""
    pointer_windows, focused_window = context.pointer_windows, context.focused_window
    for element in context.pointer_elements or ():
        if element is not None and (reason := _element_reason(action, element)) is not None:
            return RiskAssessment(Risk.HIGH, reason)
    if action.presses or isinstance(action, Scroll):
        target = target_risk(getattr(action, "element", None))
        if target is not None:
            return RiskAssessment(Risk.HIGH, target)
    if isinstance(action, Scroll) and (said := getattr(action, "element", None)) \
            and _SELECTOR_WORDS.search(fold_words(said)):
        return RiskAssessment(Risk.HIGH, f"a scroll over \u2018{display_safe(said)}\u2019 may change a selector's "
                              "value")
    if context.on_window_frame and not isinstance(action, Move):
        return RiskAssessment(Risk.HIGH, "acts on a window's title bar or frame (its buttons close, minimise or "
                              "resize the window)")
    what = (action.verb or action.kind).replace("-", " ")
    harmless = RiskAssessment(Risk.LOW, f"a {what} in a known window that is not a terminal")
    if pointer_windows is not None and action.points():
        for under in pointer_windows:
            if not under:
                return RiskAssessment(Risk.HIGH, "acts with the pointer where no known window is (Holodesk cannot "
                                      "tell whether it is a terminal)")
            if is_terminal(under):
                return RiskAssessment(Risk.HIGH, f"acts with the pointer in a terminal ({display_safe(under)})")
        return harmless
    window = _window_reason(focused_window, "acts with the pointer")
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    return harmless


_SELECTOR_WORDS = re.compile(r"(?<![^\W_])(?:combo|combobox|drop[\s_-]?down|dropdown|select|selector|spin|spinner|"
                             r"slider|picker|chooser|volume|zoom|tabs?)(?![^\W_])")
"""Words that name an element whose value a scroll wheel changes (folded, see :func:`fold_words`)."""


_RULES: dict[type[Action], Callable[[Any, _Context], RiskAssessment]] = {
    **dict.fromkeys(OFF_SCREEN_TYPES, _touches_nothing),
    KeyUp: _assess_key_up, KeyDown: _assess_key_down, Type: _assess_typing, Key: _assess_keys,
    Click: _assess_pointer, Move: _assess_pointer, Drag: _assess_pointer, Scroll: _assess_pointer,
}
"""The rule of each action class the safety rules know; any other class asks (:func:`assess`)."""
