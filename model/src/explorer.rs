//! A small exhaustive breadth-first explorer: every state reachable from the initial states, each
//! visited once (by a 64-bit fingerprint), every property checked on every state, and for each
//! property the shortest path to its first discovery (a counterexample of an `always` property, an
//! example of a `sometimes` one).

use std::collections::hash_map::{DefaultHasher, Entry};
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

/// A system to explore: states, the actions enabled in each, and what an action leads to.
pub trait Model {
    /// A state of the whole system.
    type State: Clone + Eq + Hash + std::fmt::Debug;
    /// A step from one state to another.
    type Action: Clone + std::fmt::Debug;

    /// Where the system starts.
    fn init_states(&self) -> Vec<Self::State>;
    /// The actions enabled in `state`, appended to `actions`.
    fn actions(&self, state: &Self::State, actions: &mut Vec<Self::Action>);
    /// The state `action` leads to from `state` (`None`: nothing changes).
    fn next_state(&self, state: &Self::State, action: &Self::Action) -> Option<Self::State>;
    /// What must hold (or be reachable).
    fn properties(&self) -> Vec<Property<Self>>;
    /// The fingerprint by which states are deduplicated: states with the same fingerprint are
    /// explored once. By default the state's hash; a model with symmetries may give every state
    /// of an orbit the same fingerprint (sound when its steps and properties commute with them).
    fn fingerprint(&self, state: &Self::State) -> u64 {
        fingerprint(state)
    }
}

/// How a property is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// Holds in every reachable state; a state where it does not is a counterexample.
    Always,
    /// Holds in some reachable state; such a state is an example.
    Sometimes,
}

/// A named condition on states.
pub struct Property<M: Model + ?Sized> {
    /// Its name.
    pub name: &'static str,
    /// How it is judged.
    pub expectation: Expectation,
    /// The condition.
    pub condition: fn(&M, &M::State) -> bool,
}

impl<M: Model + ?Sized> std::fmt::Debug for Property<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Property")
            .field("name", &self.name)
            .field("expectation", &self.expectation)
            .finish()
    }
}

/// Where exploration stops early.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// At most this many unique states (`None`: all).
    pub max_states: Option<usize>,
    /// Stop as soon as every `always` property has a counterexample.
    pub stop_when_all_violated: bool,
    /// Stop as soon as this property has a discovery.
    pub stop_at: Option<&'static str>,
}

/// A property's discovery: the path from an initial state, each action with the state it led to.
#[derive(Debug, Clone)]
pub struct Discovery<M: Model> {
    /// The property.
    pub property: &'static str,
    /// How it is judged.
    pub expectation: Expectation,
    /// The initial state.
    pub init: M::State,
    /// The steps.
    pub path: Vec<(M::Action, M::State)>,
}

/// What an exploration found.
#[derive(Debug)]
pub struct Report<M: Model> {
    /// Unique states visited.
    pub states: usize,
    /// Transitions taken (including those to states already seen).
    pub transitions: usize,
    /// The longest shortest path from an initial state.
    pub depth: usize,
    /// Whether every reachable state was visited.
    pub complete: bool,
    /// The first discovery of each property that has one.
    pub discoveries: Vec<Discovery<M>>,
    /// Every property's name and expectation.
    pub properties: Vec<(&'static str, Expectation)>,
}

impl<M: Model> Report<M> {
    /// The discovery of `property`, if any.
    pub fn discovery(&self, property: &str) -> Option<&Discovery<M>> {
        self.discoveries
            .iter()
            .find(|discovery| discovery.property == property)
    }

    /// Whether `property` holds: an `always` property without counterexample, a `sometimes`
    /// property with an example. (An `always` property holds only as far as the exploration went:
    /// see [`Report::complete`].)
    pub fn holds(&self, property: &str) -> bool {
        let found = self.discovery(property).is_some();
        match self
            .properties
            .iter()
            .find(|(name, _)| *name == property)
            .map(|(_, expectation)| *expectation)
        {
            Some(Expectation::Always) => !found,
            Some(Expectation::Sometimes) => found,
            None => false,
        }
    }

    /// The properties that do not hold, by name.
    pub fn failing(&self) -> Vec<&'static str> {
        self.properties
            .iter()
            .map(|(name, _)| *name)
            .filter(|name| !self.holds(name))
            .collect()
    }
}

impl<M: Model> std::fmt::Display for Discovery<M>
where
    M::Action: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.expectation {
            Expectation::Always => "counterexample",
            Expectation::Sometimes => "example",
        };
        writeln!(
            f,
            "{what} of {} in {} steps from {:?}",
            self.property,
            self.path.len(),
            self.init
        )?;
        for (step, (action, state)) in self.path.iter().enumerate() {
            writeln!(f, "{:>3}. {action:?}\n     -> {state:?}", step + 1)?;
        }
        Ok(())
    }
}

/// The 64-bit hash of `value`.
pub fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Explores `model` breadth first within `limits`.
pub fn explore<M: Model>(model: &M, limits: Limits) -> Report<M> {
    let properties = model.properties();
    // fingerprint -> parent's fingerprint (an initial state is its own parent)
    let mut seen: HashMap<u64, u64> = HashMap::new();
    let mut queue: VecDeque<(M::State, u64, usize)> = VecDeque::new();
    let mut found: Vec<Option<u64>> = vec![None; properties.len()];
    let mut transitions = 0usize;
    let mut depth = 0usize;
    let mut complete = true;
    for state in model.init_states() {
        let print = model.fingerprint(&state);
        if let Entry::Vacant(entry) = seen.entry(print) {
            entry.insert(print);
            queue.push_back((state, print, 0));
        }
    }
    let mut actions = Vec::new();
    let progress = std::env::var_os("NODECARE_MODEL_PROGRESS").is_some();
    'explore: while let Some((state, print, level)) = queue.pop_front() {
        if progress && level > depth {
            eprintln!(
                "depth {level}: {} states, {} queued",
                seen.len(),
                queue.len()
            );
        }
        depth = depth.max(level);
        for (index, property) in properties.iter().enumerate() {
            if found[index].is_some() {
                continue;
            }
            let holds = (property.condition)(model, &state);
            let discovered = match property.expectation {
                Expectation::Always => !holds,
                Expectation::Sometimes => holds,
            };
            if discovered {
                found[index] = Some(print);
            }
        }
        if limits.stop_at.is_some_and(|name| {
            properties
                .iter()
                .zip(&found)
                .any(|(property, found)| property.name == name && found.is_some())
        }) {
            complete = false;
            break;
        }
        if limits.stop_when_all_violated
            && properties
                .iter()
                .zip(&found)
                .filter(|(property, _)| property.expectation == Expectation::Always)
                .all(|(_, found)| found.is_some())
        {
            complete = false;
            break;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for action in &actions {
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            transitions += 1;
            let next_print = model.fingerprint(&next);
            let count = seen.len();
            if let Entry::Vacant(entry) = seen.entry(next_print) {
                if limits.max_states.is_some_and(|max| count >= max) {
                    complete = false;
                    break 'explore;
                }
                entry.insert(print);
                queue.push_back((next, next_print, level + 1));
            }
        }
    }
    if !queue.is_empty() {
        complete = false;
    }
    let discoveries = properties
        .iter()
        .zip(&found)
        .filter_map(|(property, found)| {
            let print = (*found)?;
            let (init, path) = path_to(model, &seen, print)?;
            Some(Discovery {
                property: property.name,
                expectation: property.expectation,
                init,
                path,
            })
        })
        .collect();
    Report {
        states: seen.len(),
        transitions,
        depth,
        complete,
        discoveries,
        properties: properties
            .iter()
            .map(|property| (property.name, property.expectation))
            .collect(),
    }
}

/// The path to the state of fingerprint `target`, replayed from its initial state.
#[allow(
    clippy::type_complexity,
    reason = "a path is a list of (action, state)"
)]
fn path_to<M: Model>(
    model: &M,
    seen: &HashMap<u64, u64>,
    target: u64,
) -> Option<(M::State, Vec<(M::Action, M::State)>)> {
    let mut prints = vec![target];
    let mut current = target;
    loop {
        let parent = *seen.get(&current)?;
        if parent == current {
            break;
        }
        prints.push(parent);
        current = parent;
    }
    prints.reverse();
    let init = model
        .init_states()
        .into_iter()
        .find(|state| model.fingerprint(state) == prints[0])?;
    let mut state = init.clone();
    let mut path = Vec::new();
    let mut actions = Vec::new();
    for print in &prints[1..] {
        actions.clear();
        model.actions(&state, &mut actions);
        let (action, next) = actions.iter().find_map(|action| {
            let next = model.next_state(&state, action)?;
            (model.fingerprint(&next) == *print).then(|| (action.clone(), next))
        })?;
        path.push((action, next.clone()));
        state = next;
    }
    Some((init, path))
}
